//! The executable specification of nextok.
//!
//! Each module is a plain, textbook implementation of one part of
//! the specification (*Inference and Decoding*), written as directly from the specification's formulas
//! as possible and with no attention to speed. The tests in `tests/` check the specification's
//! worked examples against these references and against the fast crates, and use proptest to check
//! that the fast crates agree with the references on random inputs.

pub mod sampling;
pub mod sampling_extra;
pub mod stopping;
