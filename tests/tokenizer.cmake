# Tokenizer (byte-level BPE from tokenizer.json) and chat templates.
mm_oracle(tokenizer_corpus)
mm_oracle(chat_template)
mm_test(test_tokenizer ORACLES tokenizer_corpus)
mm_test(test_chat_template ORACLES chat_template)
# SentencePiece (T5/umT5) tokenizer against transformers, and Wan's prompt cleaning against diffusers.
mm_oracle(sentencepiece_tokenizer)
mm_test(test_sentencepiece_tokenizer ORACLES sentencepiece_tokenizer)
