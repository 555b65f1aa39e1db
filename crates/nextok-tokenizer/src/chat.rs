//! Chat templates: a conversation rendered into the exact text the model was trained on.

use std::ops::Range;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, ErrorKind};
use nextok_gguf::GgufFile;
use serde::Serialize;
use serde_json::Value as Json;

use crate::Error;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// Who wrote it: `system`, `user` or `assistant` (templates may know other roles).
    pub role: String,
    /// What it says.
    pub content: String,
}

impl Message {
    /// A message with any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }

    /// Instructions from the application.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A user's message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// The model's own earlier answer.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// ChatML (Qwen, SmolLM, many fine-tunes), without a default system message.
const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Meta Llama 3 Instruct's template.
const LLAMA3: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

/// Meta Llama 2 Chat's template: the system message inside the first `[INST]`.
const LLAMA2: &str = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

/// Mistral Instruct v0.1's template: user and assistant only.
const MISTRAL: &str = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

/// A Jinja chat template with the BOS and EOS texts it may use.
///
/// Rendering follows transformers' `apply_chat_template`: `trim_blocks` and `lstrip_blocks` on,
/// `break` and `continue` in loops, `raise_exception(message)`, a `tojson` filter that does not
/// escape HTML and formats like Python's `json.dumps`, Python string methods (`strip`,
/// `startswith`, `split`, ...), and the variables `messages`, `add_generation_prompt`,
/// `bos_token` and `eos_token`.
///
/// ```
/// use nextok_tokenizer::{ChatTemplate, Message};
///
/// let template = ChatTemplate::builtin("chatml")?;
/// let text = template.render(&[Message::user("Hi")], true)?;
/// assert_eq!(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
/// # Ok::<(), nextok_tokenizer::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    name: String,
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// A template from its Jinja source. `name` appears in error messages. The source is parsed
    /// here, so a template with a syntax error is refused at once.
    pub fn new(
        name: impl Into<String>,
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, Error> {
        let template = ChatTemplate {
            name: name.into(),
            source: source.into(),
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        };
        let env = environment();
        env.template_from_named_str(&template.name, &template.source)
            .map_err(|e| template.error(&e))?;
        Ok(template)
    }

    /// The model's own template (`tokenizer.chat_template`), named `chat_template`, with BOS and
    /// EOS texts from its vocabulary.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, Error> {
        let meta = file.metadata();
        let source = meta.get_str("tokenizer.chat_template")?;
        let tokens = meta.get_str_array("tokenizer.ggml.tokens")?;
        let text_of = |key: &str| -> Result<String, Error> {
            if meta.get(key).is_none() {
                return Ok(String::new());
            }
            let id = meta.get_u64(key)?;
            tokens
                .get(id as usize)
                .cloned()
                .ok_or_else(|| Error::SpecialTokenOutOfRange {
                    key: key.to_owned(),
                    id,
                    vocab_size: tokens.len(),
                })
        };
        Self::new(
            "chat_template",
            source,
            text_of("tokenizer.ggml.bos_token_id")?,
            text_of("tokenizer.ggml.eos_token_id")?,
        )
    }

    /// The template of a Hugging Face `tokenizer_config.json`: its `chat_template` (a string,
    /// or a list of named templates, of which `default` is taken), named `chat_template`, with
    /// its `bos_token` and `eos_token`.
    pub fn from_tokenizer_config(json: &[u8]) -> Result<Self, Error> {
        let text = std::str::from_utf8(json).map_err(|e| Error::InvalidUtf8 {
            offset: e.valid_up_to(),
        })?;
        let config: Json = serde_json::from_str(text).map_err(|e| Error::TokenizerJson {
            message: format!("tokenizer_config.json: {e}"),
        })?;
        let missing = || Error::TokenizerJson {
            message: "tokenizer_config.json has no chat_template".to_owned(),
        };
        let source = match config.get("chat_template").ok_or_else(missing)? {
            Json::String(s) => s.clone(),
            Json::Array(list) => list
                .iter()
                .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
                .and_then(|t| t.get("template"))
                .and_then(Json::as_str)
                .ok_or_else(missing)?
                .to_owned(),
            _ => return Err(missing()),
        };
        let token = |key: &str| match config.get(key) {
            Some(Json::String(s)) => s.clone(),
            Some(Json::Object(o)) => o
                .get("content")
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_owned(),
            _ => String::new(),
        };
        Self::new(
            "chat_template",
            source,
            token("bos_token"),
            token("eos_token"),
        )
    }

    /// A built-in template: `chatml`, `llama3`, `llama2` or `mistral`, with that family's BOS
    /// and EOS texts.
    pub fn builtin(name: &str) -> Result<Self, Error> {
        let (source, bos, eos) = match name {
            "chatml" => (CHATML, "", "<|im_end|>"),
            "llama3" => (LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
            "llama2" => (LLAMA2, "<s>", "</s>"),
            "mistral" => (MISTRAL, "<s>", "</s>"),
            _ => {
                return Err(Error::UnknownTemplate {
                    name: name.to_owned(),
                })
            }
        };
        Self::new(name, source, bos, eos)
    }

    /// The same template with other BOS and EOS texts.
    pub fn with_tokens(
        mut self,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Self {
        self.bos_token = bos_token.into();
        self.eos_token = eos_token.into();
        self
    }

    /// The template's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders a conversation; with `add_generation_prompt`, the text ends with the header of
    /// the assistant's next message.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, Error> {
        self.render_with(
            &Value::from_serialize(messages),
            add_generation_prompt,
            Value::UNDEFINED,
        )
    }

    /// Renders a conversation as [`ChatTemplate::render`] does, and says which bytes of the
    /// text came from the messages' content.
    ///
    /// The encoder needs this to keep special-token text in a message as text
    /// ([`Tokenizer::encode_with_plain_ranges`](crate::Tokenizer::encode_with_plain_ranges))
    /// while the tokens the template writes stay special. Each content is rendered a second time
    /// marked with Unicode noncharacters that occur nowhere in the input: one before and one
    /// after it (inside its leading and trailing whitespace, so that `trim` and `strip` treat it
    /// as before) and one between every two of its characters, so that no piece of it longer
    /// than a character can reach the text unmarked. The marks are then found and removed. When
    /// they are unbalanced, or the text without them is not exactly the plain rendering (the
    /// template slices, splits or tests the content), the answer is
    /// [`Error::ContentNotLocated`], never a guess.
    ///
    /// ```
    /// use nextok_tokenizer::{ChatTemplate, Message};
    ///
    /// let template = ChatTemplate::builtin("chatml")?;
    /// let chat = template.render_with_spans(&[Message::user("<|im_end|>")], false)?;
    /// assert_eq!(chat.text, "<|im_start|>user\n<|im_end|><|im_end|>\n");
    /// assert_eq!(chat.content, [17..27]);
    /// assert_eq!(&chat.text[17..27], "<|im_end|>");
    /// # Ok::<(), nextok_tokenizer::Error>(())
    /// ```
    pub fn render_with_spans(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<RenderedChat, Error> {
        let text = self.render(messages, add_generation_prompt)?;
        let not_located = |reason| Error::ContentNotLocated {
            template: self.name.clone(),
            reason,
        };
        let used = |c: char| {
            self.source.contains(c)
                || self.bos_token.contains(c)
                || self.eos_token.contains(c)
                || messages
                    .iter()
                    .any(|m| m.role.contains(c) || m.content.contains(c))
        };
        let mut free = noncharacters().filter(|&c| !used(c));
        let (Some(open), Some(between), Some(close)) = (free.next(), free.next(), free.next())
        else {
            return Err(not_located(
                "was given messages that hold every Unicode noncharacter",
            ));
        };
        let marks = Marks {
            open,
            between,
            close,
        };
        let marked: Vec<Message> = messages
            .iter()
            .map(|m| Message {
                role: m.role.clone(),
                content: marks.wrap(&m.content),
            })
            .collect();
        let rendered = self
            .render(&marked, add_generation_prompt)
            .map_err(|_| not_located("fails when the content is marked (it tests the content)"))?;
        let mut plain = String::with_capacity(text.len());
        let mut content = Vec::new();
        let mut start: Option<usize> = None;
        let unbalanced = "cuts the content (its start or end is missing)";
        for c in rendered.chars() {
            if c == open {
                if start.replace(plain.len()).is_some() {
                    return Err(not_located(unbalanced));
                }
            } else if c == close {
                let from = start.take().ok_or_else(|| not_located(unbalanced))?;
                if from < plain.len() {
                    content.push(from..plain.len());
                }
            } else if c == between {
                if start.is_none() {
                    return Err(not_located(unbalanced));
                }
            } else {
                plain.push(c);
            }
        }
        if start.is_some() {
            return Err(not_located(unbalanced));
        }
        if plain != text {
            return Err(not_located(
                "renders marked content differently (it slices, splits or tests the content)",
            ));
        }
        Ok(RenderedChat { text, content })
    }

    /// Renders any serialisable list of messages (for templates that read more fields than
    /// `role` and `content`), with extra variables from `extra` (a map, or undefined).
    pub fn render_with(
        &self,
        messages: &Value,
        add_generation_prompt: bool,
        extra: Value,
    ) -> Result<String, Error> {
        let env = environment();
        let template = env
            .template_from_named_str(&self.name, &self.source)
            .map_err(|e| self.error(&e))?;
        let base = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        let ctx = if extra.is_undefined() {
            base
        } else {
            minijinja::context! { ..base, ..extra }
        };
        template.render(ctx).map_err(|e| self.error(&e))
    }

    fn error(&self, e: &minijinja::Error) -> Error {
        let message = match e.detail() {
            Some(detail) => format!("{}: {detail}", e.kind()),
            None => e.kind().to_string(),
        };
        Error::Template {
            template: e.name().unwrap_or(&self.name).to_owned(),
            line: e.line(),
            message,
        }
    }
}

/// A conversation rendered by [`ChatTemplate::render_with_spans`]: the text, and the byte ranges
/// of it that came from the messages' content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedChat {
    /// The rendered text, exactly [`ChatTemplate::render`]'s.
    pub text: String,
    /// The byte ranges of `text` that hold message content, in order and non-overlapping; each
    /// starts and ends on a character boundary. A content's leading and trailing whitespace is
    /// left out, and an empty (or all-space) content has no range.
    pub content: Vec<Range<usize>>,
}

/// The 66 Unicode noncharacters, which no real text needs: U+FDD0 to U+FDEF and the last two
/// code points of every plane.
fn noncharacters() -> impl Iterator<Item = char> {
    (0xFDD0..=0xFDEF)
        .chain((0..=16u32).flat_map(|plane| [plane << 16 | 0xFFFE, plane << 16 | 0xFFFF]))
        .filter_map(char::from_u32)
}

/// The three noncharacters that mark content while it is located.
struct Marks {
    open: char,
    between: char,
    close: char,
}

impl Marks {
    /// A content with `open` and `close` around everything but its leading and trailing
    /// whitespace, and `between` between every two characters of that, so that any part of the
    /// content longer than one character carries a mark wherever the template puts it. Content
    /// with nothing but whitespace is left as it is (it holds no special-token text to protect).
    fn wrap(&self, content: &str) -> String {
        let core = content.trim();
        if core.is_empty() {
            return content.to_owned();
        }
        let lead = content.len() - content.trim_start().len();
        let trail = lead + core.len();
        let mut out = String::with_capacity(content.len() * 4 + 8);
        out.push_str(&content[..lead]);
        out.push(self.open);
        for (i, c) in core.chars().enumerate() {
            if i > 0 {
                out.push(self.between);
            }
            out.push(c);
        }
        out.push(self.close);
        out.push_str(&content[trail..]);
        out
    }
}

/// The environment transformers renders chat templates in.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |message: String| -> Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    env.add_filter("tojson", tojson);
    // Jinja2 prints Python's values: `True`, `False`, `None`.
    env.set_formatter(|out, state, value| match value.kind() {
        ValueKind::Bool => out
            .write_str(if value.is_true() { "True" } else { "False" })
            .map_err(Into::into),
        ValueKind::None => out.write_str("None").map_err(Into::into),
        _ => minijinja::escape_formatter(out, state, value),
    });
    env
}

/// transformers' `tojson`: Python's `json.dumps(value, ensure_ascii=False, indent=indent,
/// sort_keys=sort_keys)`, not escaped for HTML.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    // Python's other options do not change the output for what templates pass.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    python_json(&value, indent, 0, sort_keys.unwrap_or(false), &mut out)?;
    Ok(Value::from_safe_string(out))
}

/// Writes a value as Python's `json.dumps` does: `", "` and `": "` without indent; with indent,
/// one item per line and `","` at line ends. Maps keep their order unless `sort_keys`.
fn python_json(
    value: &Value,
    indent: Option<usize>,
    level: usize,
    sort_keys: bool,
    out: &mut String,
) -> Result<(), minijinja::Error> {
    let newline = |out: &mut String, level: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * level));
        }
    };
    let separator = if indent.is_some() { "," } else { ", " };
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::String => {
            out.push_str(&Json::String(value.as_str().unwrap_or_default().to_owned()).to_string())
        }
        ValueKind::Number => {
            let json = serde_json::to_value(value).map_err(|e| {
                minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}"))
            })?;
            out.push_str(&json.to_string());
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(separator);
                }
                newline(out, level + 1);
                let name = match key.as_str() {
                    Some(s) => s.to_owned(),
                    None => key.to_string(),
                };
                out.push_str(&Json::String(name).to_string());
                out.push_str(": ");
                python_json(&value.get_item(key)?, indent, level + 1, sort_keys, out)?;
            }
            newline(out, level);
            out.push('}');
        }
        _ => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(separator);
                }
                newline(out, level + 1);
                python_json(item, indent, level + 1, sort_keys, out)?;
            }
            newline(out, level);
            out.push(']');
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_json_formatting() {
        let v = Value::from_iter([
            (
                "role",
                Value::from_serialize([Value::from(1), Value::from("<b>")]),
            ),
            ("content", Value::from_iter(Vec::<(String, Value)>::new())),
        ]);
        // Python: json.dumps({"role": [1, "<b>"], "content": {}}) gives the same text.
        let mut out = String::new();
        python_json(&v, None, 0, false, &mut out).unwrap();
        assert_eq!(out, r#"{"role": [1, "<b>"], "content": {}}"#);
        // Python: json.dumps({"a": [1.5, None, True]}, indent=2).
        let v = Value::from_iter([(
            "a",
            Value::from_serialize([Value::from(1.5), Value::from(()), Value::from(true)]),
        )]);
        let mut out = String::new();
        python_json(&v, Some(2), 0, false, &mut out).unwrap();
        assert_eq!(out, "{\n  \"a\": [\n    1.5,\n    null,\n    true\n  ]\n}");
    }
}
