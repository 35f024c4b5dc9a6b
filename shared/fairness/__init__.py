"""Fair drops: a pre-queue drawn at random with a seed committed in advance."""
