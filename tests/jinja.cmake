# Our Jinja interpreter for Hugging Face chat templates, against transformers' apply_chat_template.
mm_oracle(jinja_chat_templates)
mm_test(test_jinja_template ORACLES jinja_chat_templates)
# The model directory's template through the product path: tools, keyword arguments, messages'
# other fields, against the same oracle's published cases.
mm_test(test_model_chat_template_inputs ORACLES jinja_chat_templates)
