"""codedrop's tools: the local stack, benchmarks, load test, deploy and operator commands, each
a package run with `python -m` behind a thin command in this folder."""
