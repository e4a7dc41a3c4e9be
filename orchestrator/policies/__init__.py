"""Cost-cutting policies: market and zone, resume, rescale, right-size."""
