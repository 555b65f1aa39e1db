//! Criterion benchmarks of the nextok crates live in `benches/`; this library is empty.
