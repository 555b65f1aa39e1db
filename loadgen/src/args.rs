//! The command line of `nextok-loadgen`, read by hand (a few flags; no parser crate needed).

use std::time::Duration;

/// A command line that cannot be used.
#[derive(Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgError {
    /// A flag that the tool does not know.
    #[error("unknown argument `{0}` (see --help)")]
    Unknown(String),
    /// A flag given without its value.
    #[error("{0} needs a value")]
    Missing(&'static str),
    /// A value that is not what the flag takes.
    #[error("{flag}: `{value}` is not {expected}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What the flag takes.
        expected: &'static str,
    },
}

/// What to measure and how to report it.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    /// The server's base URL, without a trailing `/` or `/v1`.
    pub url: String,
    /// Requests per concurrency.
    pub requests: usize,
    /// The concurrencies of the sweep, in order.
    pub concurrency: Vec<usize>,
    /// `max_tokens` of each request.
    pub max_tokens: u32,
    /// The `model` field; `None` takes the first of `GET /v1/models`.
    pub model: Option<String>,
    /// A bearer token.
    pub api_key: Option<String>,
    /// The seed of the prompts and of the requests' own seeds.
    pub seed: u64,
    /// `temperature` of each request.
    pub temperature: f32,
    /// The longest one request may take.
    pub timeout: Duration,
    /// Print JSON instead of the table.
    pub json: bool,
    /// Print the help and stop.
    pub help: bool,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            url: "http://127.0.0.1:8080".into(),
            requests: 32,
            concurrency: vec![1, 4, 8, 16],
            max_tokens: 64,
            model: None,
            api_key: None,
            seed: 0,
            temperature: 0.0,
            timeout: Duration::from_secs(300),
            json: false,
            help: false,
        }
    }
}

/// The help text.
pub const HELP: &str = "\
nextok-loadgen: streamed chat requests against an OpenAI-compatible server, at fixed
concurrencies, reported with vLLM's figures (output tokens/s; TTFT, TPOT, ITL, E2E as
mean / p50 / p99 in ms).

Each request: POST URL/v1/chat/completions, stream with include_usage, ignore_eos, max_tokens,
a prompt of 40-120 words made from --seed (the same on every run), on a new connection.

  --url URL            the server (default http://127.0.0.1:8080)
  --requests N         requests per concurrency (default 32; 1 to 100000)
  --concurrency LIST   the sweep, e.g. 1,4,8,16 (the default; each 1 to 1024)
  --max-tokens N       output tokens per request (default 64; 1 to 1000000)
  --model NAME         the model field (default: the first of GET /v1/models)
  --api-key KEY        bearer token (default: $NEXTOK_API_KEY when set)
  --seed N             seed of the prompts and of each request's seed (default 0)
  --temperature T      temperature of each request (default 0: greedy)
  --timeout SECONDS    the longest one request may take (default 300)
  --json               one JSON object instead of the table
";

fn number<T: std::str::FromStr + PartialOrd>(
    flag: &'static str,
    value: &str,
    low: T,
    high: T,
    expected: &'static str,
) -> Result<T, ArgError> {
    value
        .parse::<T>()
        .ok()
        .filter(|n| *n >= low && *n <= high)
        .ok_or_else(|| ArgError::Invalid {
            flag,
            value: value.to_string(),
            expected,
        })
}

impl Args {
    /// Reads the arguments (without the program's name). `NEXTOK_API_KEY` is the key when
    /// `--api-key` is not given.
    pub fn parse(args: &[String], env_key: Option<String>) -> Result<Args, ArgError> {
        let mut a = Args {
            api_key: env_key.filter(|k| !k.is_empty()),
            ..Args::default()
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
                _ => (arg.as_str(), None),
            };
            let mut value = |name: &'static str| -> Result<String, ArgError> {
                match &inline {
                    Some(v) => Ok(v.clone()),
                    None => it.next().cloned().ok_or(ArgError::Missing(name)),
                }
            };
            match flag {
                "--url" => {
                    let url = value("--url")?;
                    if !url.starts_with("http://") {
                        return Err(ArgError::Invalid {
                            flag: "--url",
                            value: url,
                            expected: "an http:// URL (no TLS: a server on this machine)",
                        });
                    }
                    let url = url.trim_end_matches('/');
                    a.url = url.strip_suffix("/v1").unwrap_or(url).to_string();
                }
                "--requests" => {
                    a.requests = number(
                        "--requests",
                        &value("--requests")?,
                        1,
                        100_000,
                        "a count from 1 to 100000",
                    )?
                }
                "--concurrency" => {
                    let list = value("--concurrency")?;
                    a.concurrency = list
                        .split(',')
                        .map(|c| {
                            number(
                                "--concurrency",
                                c.trim(),
                                1,
                                1024,
                                "a comma-separated list of counts from 1 to 1024",
                            )
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--max-tokens" => {
                    a.max_tokens = number(
                        "--max-tokens",
                        &value("--max-tokens")?,
                        1,
                        1_000_000,
                        "a count from 1 to 1000000",
                    )?
                }
                "--model" => a.model = Some(value("--model")?),
                "--api-key" => a.api_key = Some(value("--api-key")?),
                "--seed" => {
                    a.seed = number("--seed", &value("--seed")?, 0, u64::MAX, "a whole number")?
                }
                "--temperature" => {
                    a.temperature = number(
                        "--temperature",
                        &value("--temperature")?,
                        0.0,
                        100.0,
                        "a number from 0 to 100",
                    )?
                }
                "--timeout" => {
                    let s: f64 = number(
                        "--timeout",
                        &value("--timeout")?,
                        0.001,
                        86_400.0,
                        "seconds from 0.001 to 86400",
                    )?;
                    a.timeout = Duration::from_secs_f64(s);
                }
                "--json" if inline.is_none() => a.json = true,
                "--help" | "-h" if inline.is_none() => a.help = true,
                _ => return Err(ArgError::Unknown(arg.clone())),
            }
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, ArgError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Args::parse(&args, None)
    }

    #[test]
    fn the_defaults_are_the_issue_load() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.requests, 32);
        assert_eq!(a.concurrency, [1, 4, 8, 16]);
        assert_eq!(a.max_tokens, 64);
        assert_eq!(a.url, "http://127.0.0.1:8080");
    }

    #[test]
    fn flags_take_values_with_a_space_or_an_equals_sign() {
        let a = parse(&[
            "--url",
            "http://127.0.0.1:8081/v1/",
            "--requests=8",
            "--concurrency",
            "1, 4",
            "--max-tokens",
            "16",
            "--model",
            "m",
            "--api-key",
            "k",
            "--seed",
            "7",
            "--temperature",
            "0.5",
            "--timeout",
            "2.5",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.url, "http://127.0.0.1:8081");
        assert_eq!((a.requests, a.max_tokens, a.seed), (8, 16, 7));
        assert_eq!(a.concurrency, [1, 4]);
        assert_eq!(a.model.as_deref(), Some("m"));
        assert_eq!(a.api_key.as_deref(), Some("k"));
        assert_eq!(a.temperature, 0.5);
        assert_eq!(a.timeout, Duration::from_millis(2500));
        assert!(a.json);
    }

    #[test]
    fn the_environment_key_yields_to_the_flag() {
        let from_env = Args::parse(&[], Some("e".into())).unwrap();
        assert_eq!(from_env.api_key.as_deref(), Some("e"));
        let flag = Args::parse(&["--api-key".into(), "f".into()], Some("e".into())).unwrap();
        assert_eq!(flag.api_key.as_deref(), Some("f"));
        assert_eq!(Args::parse(&[], Some(String::new())).unwrap().api_key, None);
    }

    #[test]
    fn bad_command_lines_are_typed_errors() {
        assert_eq!(parse(&["--requests"]), Err(ArgError::Missing("--requests")));
        assert!(matches!(
            parse(&["--requests", "0"]),
            Err(ArgError::Invalid {
                flag: "--requests",
                ..
            })
        ));
        assert!(matches!(
            parse(&["--concurrency", "1,,4"]),
            Err(ArgError::Invalid {
                flag: "--concurrency",
                ..
            })
        ));
        assert!(matches!(
            parse(&["--temperature", "NaN"]),
            Err(ArgError::Invalid {
                flag: "--temperature",
                ..
            })
        ));
        assert!(matches!(
            parse(&["--url", "https://example.invalid"]),
            Err(ArgError::Invalid { flag: "--url", .. })
        ));
        assert_eq!(parse(&["--jsn"]), Err(ArgError::Unknown("--jsn".into())));
        assert_eq!(
            parse(&["--json=1"]),
            Err(ArgError::Unknown("--json=1".into()))
        );
    }
}
