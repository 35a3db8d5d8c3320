"""Models: the embedded tokenizer + tiny Llama, loading any HF causal LM, sampling and log-probs."""
