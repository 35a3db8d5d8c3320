"""Models: the embedded tokenizer + tiny Llama, loading any HF causal LM, and the generation
backends (model.backend) every stage samples, reads and scores through."""
