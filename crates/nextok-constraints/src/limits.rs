//! Bounds on the cost of compiling a constraint and of each mask, for untrusted input.

use std::fmt;

/// Bounds on what one constraint may cost (in the spirit of llguidance's `ParserLimits`).
///
/// Grammar sizes are checked when a grammar is built, so a grammar too large to use fails
/// to compile; the work of one mask or one token, which depends on the tokens chosen, is
/// counted as it is done and stops at the bound with [`Error::LimitExceeded`] rather than
/// running on. The defaults hold every grammar and schema of the test suites with a wide
/// margin; a caller serving strangers may lower them.
///
/// [`Error::LimitExceeded`]: crate::Error::LimitExceeded
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Limits {
    /// Most grammar rules after lowering (every repeat, group and alternative is a rule).
    pub max_rules: usize,
    /// Most grammar items: symbols over all rules plus one end position per rule.
    pub max_items: usize,
    /// Most distinct terminal automata in one grammar (each caches one mask per state it is
    /// seen in, a bitset of the vocabulary).
    pub max_terminals: usize,
    /// Most automaton states over all terminals of one grammar.
    pub max_terminal_states: usize,
    /// Most work units in one mask computation, or in reading one token's bytes
    /// (`advance`): a work unit is one Earley item processed, one completion matched or one
    /// terminal step.
    pub max_mask_work: u64,
}

impl Limits {
    /// The default bounds (see each field).
    pub const DEFAULT: Limits = Limits {
        max_rules: 1_000_000,
        max_items: 4_000_000,
        max_terminals: 20_000,
        max_terminal_states: 2_000_000,
        max_mask_work: 1_000_000,
    };

    /// Sets [`Limits::max_rules`].
    pub const fn with_max_rules(mut self, n: usize) -> Self {
        self.max_rules = n;
        self
    }

    /// Sets [`Limits::max_items`].
    pub const fn with_max_items(mut self, n: usize) -> Self {
        self.max_items = n;
        self
    }

    /// Sets [`Limits::max_terminals`].
    pub const fn with_max_terminals(mut self, n: usize) -> Self {
        self.max_terminals = n;
        self
    }

    /// Sets [`Limits::max_terminal_states`].
    pub const fn with_max_terminal_states(mut self, n: usize) -> Self {
        self.max_terminal_states = n;
        self
    }

    /// Sets [`Limits::max_mask_work`].
    pub const fn with_max_mask_work(mut self, n: u64) -> Self {
        self.max_mask_work = n;
        self
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Which of the [`Limits`] was exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// [`Limits::max_rules`].
    Rules,
    /// [`Limits::max_items`].
    Items,
    /// [`Limits::max_terminals`].
    Terminals,
    /// [`Limits::max_terminal_states`].
    TerminalStates,
    /// [`Limits::max_mask_work`].
    MaskWork,
}

impl Limit {
    /// The field of [`Limits`] that sets this limit.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Rules => "max_rules",
            Limit::Items => "max_items",
            Limit::Terminals => "max_terminals",
            Limit::TerminalStates => "max_terminal_states",
            Limit::MaskWork => "max_mask_work",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `Err(LimitExceeded)` when `value > max`.
pub(crate) fn check(limit: Limit, value: usize, max: usize) -> Result<(), crate::Error> {
    if value > max {
        return Err(crate::Error::LimitExceeded {
            limit,
            value: value as u64,
            max: max as u64,
        });
    }
    Ok(())
}
