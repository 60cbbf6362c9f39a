"""icefloe benchmarks: `make bench` runs them and writes benchmarks/results/*.json."""
