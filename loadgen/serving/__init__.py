"""``gpuscale-load serve``: a small model of how a continuously batching LLM inference engine loads a GPU.

It is not an inference engine: there is no model, no tokenizer, no attention and no API for prompts. Requests are
numbers (a prompt length and an output length) that arrive at a chosen rate; a scheduler shaped like vLLM's V1
scheduler batches them; each step's work is a chain of bf16 matrix products on the GPU (or a modelled duration
without one); and ``/metrics`` reports the queue, the batch, the KV use and the latencies under vLLM's own names.
"""
