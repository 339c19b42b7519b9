# Our Jinja interpreter for Hugging Face chat templates, against transformers' apply_chat_template.
mm_oracle(jinja_chat_templates)
mm_test(test_jinja_template ORACLES jinja_chat_templates)
