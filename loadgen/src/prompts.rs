//! The prompts: word salads of 40 to 120 words, made from a seed, so that two servers measured
//! one after the other get exactly the same requests.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// The fewest words in a prompt.
pub const MIN_WORDS: usize = 40;
/// The most words in a prompt.
pub const MAX_WORDS: usize = 120;

/// Common English words: each is one or two tokens in any modern vocabulary.
const WORDS: &[&str] = &[
    "the",
    "river",
    "morning",
    "light",
    "house",
    "garden",
    "old",
    "city",
    "train",
    "window",
    "quiet",
    "story",
    "friend",
    "winter",
    "summer",
    "mountain",
    "road",
    "small",
    "bright",
    "water",
    "bread",
    "market",
    "music",
    "night",
    "letter",
    "forest",
    "school",
    "teacher",
    "child",
    "dog",
    "table",
    "paper",
    "history",
    "question",
    "answer",
    "machine",
    "language",
    "number",
    "color",
    "green",
    "blue",
    "red",
    "stone",
    "bridge",
    "harbor",
    "ship",
    "island",
    "weather",
    "cloud",
    "rain",
    "field",
    "farmer",
    "kitchen",
    "coffee",
    "book",
    "library",
    "street",
    "evening",
    "village",
    "journey",
    "careful",
    "simple",
    "early",
    "late",
    "warm",
    "cold",
    "open",
    "closed",
    "walks",
    "reads",
    "builds",
    "writes",
    "finds",
    "remembers",
    "carries",
    "watches",
    "opens",
    "under",
    "over",
    "between",
    "behind",
    "beside",
    "through",
    "and",
    "but",
    "because",
    "while",
    "after",
    "before",
    "with",
    "without",
    "every",
    "some",
    "many",
    "few",
    "a",
    "of",
    "to",
    "in",
];

/// The prompt of request `index` at concurrency `concurrency`, for `seed`: 40 to 120 words in
/// sentences.
///
/// Each (seed, concurrency, index) gives its own prompt, so the steps of a concurrency sweep do
/// not reuse one another's prompts (a server's prefix cache would otherwise make the later steps
/// look faster), and the same triple gives the same prompt on every run and every machine.
///
/// ```
/// use nextok_loadgen::prompts::{prompt, MAX_WORDS, MIN_WORDS};
/// let p = prompt(7, 0, 3);
/// assert_eq!(p, prompt(7, 0, 3));
/// assert_ne!(p, prompt(7, 1, 3));
/// let words = p.split_whitespace().count();
/// assert!((MIN_WORDS..=MAX_WORDS).contains(&words));
/// ```
pub fn prompt(seed: u64, concurrency: u64, index: u64) -> String {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&concurrency.to_le_bytes());
    key[16..24].copy_from_slice(&index.to_le_bytes());
    let mut rng = ChaCha8Rng::from_seed(key);
    let mut below = |n: usize| (rng.next_u64() % n as u64) as usize;
    let words = MIN_WORDS + below(MAX_WORDS - MIN_WORDS + 1);
    let mut text = String::from("Continue this text:");
    let mut sentence_left = 0;
    for _ in 0..words - 3 {
        let word = WORDS[below(WORDS.len())];
        if sentence_left == 0 {
            if !text.ends_with(':') {
                text.push('.');
            }
            sentence_left = 5 + below(11);
            text.push(' ');
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                text.extend(first.to_uppercase());
                text.push_str(chars.as_str());
            }
        } else {
            text.push(' ');
            text.push_str(word);
        }
        sentence_left -= 1;
    }
    text.push('.');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prompt_has_40_to_120_words_and_depends_on_all_three_numbers() {
        let mut lengths = std::collections::BTreeSet::new();
        for index in 0..200 {
            let p = prompt(1, 2, index);
            let n = p.split_whitespace().count();
            assert!((MIN_WORDS..=MAX_WORDS).contains(&n), "{n} words: {p}");
            assert!(
                p.starts_with("Continue this text: ") && p.ends_with('.'),
                "{p}"
            );
            lengths.insert(n);
        }
        // The lengths spread over the range rather than sitting at one value.
        assert!(lengths.len() > 30, "{lengths:?}");
        let p = prompt(1, 2, 3);
        assert_eq!(p, prompt(1, 2, 3));
        assert_ne!(p, prompt(0, 2, 3));
        assert_ne!(p, prompt(1, 0, 3));
        assert_ne!(p, prompt(1, 2, 4));
    }

    #[test]
    fn the_prompt_of_a_seed_is_fixed_forever() {
        // ChaCha8 from a fixed key: the first words of seed 0's first prompt are a golden, so a
        // change to the generator (which would make old measurements incomparable) fails here.
        let p = prompt(0, 0, 0);
        assert_eq!(p.split_whitespace().count(), PROMPT_0_WORDS, "{p}");
        assert!(p.starts_with(PROMPT_0_START), "{p}");
    }

    // Recorded from the generator's first run (ChaCha8, the word list above).
    const PROMPT_0_WORDS: usize = 103;
    const PROMPT_0_START: &str = "Continue this text: Island every winter bright harbor carries";
}
