//! Decide when generation stops: end tokens, max tokens, stop sequences across token boundaries, and the context window.
