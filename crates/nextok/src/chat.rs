//! A conversation that goes on: the history, and the KV cache of everything said so far.

use crate::engine::{Engine, Prompt};
use crate::generate::{Completion, Event, GenerateOptions};
use crate::Error;
use nextok_kv_cache::KvCache;
use nextok_tokenizer::Message;

/// A conversation with the model.
///
/// Each [`Chat::send`] renders the whole conversation through the chat template, as the model
/// was trained to see it, but runs through the model only what the cache does not hold yet: the
/// new user message and the headers around it. The earlier turns are not prefilled again.
pub struct Chat<'e> {
    engine: &'e Engine,
    messages: Vec<Message>,
    cache: Option<KvCache>,
}

impl std::fmt::Debug for Chat<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chat")
            .field("messages", &self.messages)
            .field("cached_tokens", &self.cache.as_ref().map(KvCache::len))
            .finish()
    }
}

impl<'e> Chat<'e> {
    /// A new conversation, with an optional system message.
    pub fn new(engine: &'e Engine, system: Option<&str>) -> Self {
        Chat {
            engine,
            messages: system.map(Message::system).into_iter().collect(),
            cache: None,
        }
    }

    /// The conversation so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Tokens whose keys and values the conversation's cache holds.
    pub fn cached_tokens(&self) -> usize {
        self.cache.as_ref().map_or(0, KvCache::len)
    }

    /// Adds the user's message, generates the answer (one completion; `n` and beams are
    /// ignored), passes every event to `on_event` as it comes, and adds the answer to the
    /// conversation. On error the user's message is taken back out.
    pub fn send(
        &mut self,
        user: &str,
        options: &GenerateOptions,
        mut on_event: impl FnMut(&Event),
    ) -> Result<Completion, Error> {
        self.messages.push(Message::user(user));
        let result = self.answer(options, &mut on_event);
        match result {
            Ok(completion) => {
                self.messages
                    .push(Message::assistant(completion.text.clone()));
                Ok(completion)
            }
            Err(e) => {
                self.messages.pop();
                Err(e)
            }
        }
    }

    fn answer(
        &mut self,
        options: &GenerateOptions,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<Completion, Error> {
        let ids = self
            .engine
            .encode_prompt(&Prompt::Chat(self.messages.clone()))?;
        let options = GenerateOptions {
            n: 1,
            beams: None,
            ..options.clone()
        };
        let mut generation = self.engine.generate_ids(ids, &options, self.cache.take())?;
        let mut completion = None;
        for event in generation.by_ref() {
            let event = event?;
            on_event(&event);
            if let Event::Done(c) = event {
                completion = Some(*c);
            }
        }
        self.cache = generation.into_cache();
        completion.ok_or(Error::InvalidOption {
            option: "generation",
            expected: "one completion",
        })
    }
}
