"""What a trained model is measured by: perplexity and bits per byte at each eval length (``perplexity``), exact
match on a task's held-out examples (``accuracy``), attention statistics by query position (``attention_stats``)."""
