//! The nextok inference library: the generation loop from prompt to streamed text, over the nextok crates.
