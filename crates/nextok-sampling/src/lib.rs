//! Turn logits into a chosen token: softmax, temperature, top-k, top-p, min-p, penalties, seeded sampling and beam search.
