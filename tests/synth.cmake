# Synthetic data and evaluation: the shapes dataset (PNG encoding, labels that match the pixels,
# determinism, `mmtrain data synth`), the tiny-shapes model template (remade by its script and
# compared with the committed files; accepted by transformers; tokenizer parity with `tokenizers`)
# and `mmtrain eval` (exact match, per-type scores, agreement with `mmtrain infer`); the moving-shapes
# video dataset (captions that match the decoded clips, determinism, `mmtrain data synth --kind video`);
# test_shapes_learning: the demo recipe can learn (vision gradients, image-dependent logits, colours).
mm_oracle(make_tiny_shapes_model)
mm_test(test_synth_shapes ORACLES make_tiny_shapes_model)
mm_test(test_evaluation)
mm_test(test_shapes_learning)
mm_test(test_synth_video)
