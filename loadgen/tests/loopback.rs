//! The client against a fake OpenAI-compatible server on 127.0.0.1: it reads the stream's text
//! chunks and usage, opens one connection per request, and counts failures. No assertion here
//! depends on how fast anything ran.

use nextok_loadgen::client::{first_model, run_step, RequestSettings};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A chat stream: a role chunk, `text_chunks` chunks of text, a finish chunk, usage, `[DONE]`.
fn stream(text_chunks: usize, completion_tokens: usize) -> String {
    let mut events = vec![
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#.to_string(),
    ];
    for i in 0..text_chunks {
        events.push(format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":" w{i}"}}}}]}}"#
        ));
    }
    events.push(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#.to_string());
    events.push(format!(
        r#"{{"choices":[],"usage":{{"prompt_tokens":50,"completion_tokens":{completion_tokens},"total_tokens":{}}}}}"#,
        50 + completion_tokens
    ));
    events.push("[DONE]".to_string());
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

/// Reads one request's head and body (by its Content-Length).
async fn read_request(socket: &mut TcpStream) -> String {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return text;
            }
        }
    }
    String::from_utf8_lossy(&data).to_string()
}

/// Serves every connection on `listener`: `GET /v1/models` lists one model; a chat request
/// gets `body` in pieces with status `status`. Counts connections and requests.
async fn serve(
    listener: TcpListener,
    status: u16,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        connections.fetch_add(1, Ordering::SeqCst);
        let requests = requests.clone();
        tokio::spawn(async move {
            // Keep answering on this connection while the client sends requests on it.
            loop {
                let request = read_request(&mut socket).await;
                if request.is_empty() {
                    return;
                }
                requests.fetch_add(1, Ordering::SeqCst);
                if request.starts_with("GET /v1/models") {
                    let body = r#"{"object":"list","data":[{"id":"fake-model","object":"model"}]}"#;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(body.as_bytes()).await;
                    continue;
                }
                if status != 200 {
                    let body = r#"{"error":{"message":"busy","type":"unavailable_error"}}"#;
                    let head = format!(
                        "HTTP/1.1 {status} Busy\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(body.as_bytes()).await;
                    continue;
                }
                // Chunked transfer, one SSE event per piece, as a streaming server sends them.
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                            transfer-encoding: chunked\r\n\r\n";
                let _ = socket.write_all(head.as_bytes()).await;
                for event in stream(3, 4).split_inclusive("\n\n") {
                    let piece = format!("{:x}\r\n{event}\r\n", event.len());
                    let _ = socket.write_all(piece.as_bytes()).await;
                    let _ = socket.flush().await;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let _ = socket.write_all(b"0\r\n\r\n").await;
            }
        });
    }
}

async fn fake_server(status: u16) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    tokio::spawn(serve(
        listener,
        status,
        connections.clone(),
        requests.clone(),
    ));
    (url, connections, requests)
}

fn settings(url: &str) -> RequestSettings {
    RequestSettings {
        base_url: url.to_string(),
        model: "fake-model".into(),
        api_key: Some("k".into()),
        max_tokens: 4,
        temperature: 0.0,
        timeout: Duration::from_secs(60),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_reads_every_stream_on_its_own_connection() {
    let (url, connections, requests) = fake_server(200).await;
    assert_eq!(first_model(&url, None).await.unwrap(), "fake-model");
    let before = connections.load(Ordering::SeqCst);
    let (report, errors) = run_step(&settings(&url), 0, 6, 3).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        (report.requests, report.completed, report.failed),
        (6, 6, 0)
    );
    // Usage counts: 4 completion tokens and 50 prompt tokens each.
    assert_eq!(report.output_tokens, 24);
    assert_eq!(report.prompt_tokens, 300);
    // Three text chunks per stream: one TTFT and one TPOT per request, two gaps each for ITL.
    assert_eq!(report.ttft.unwrap().count, 6);
    assert_eq!(report.tpot.unwrap().count, 6);
    assert_eq!(report.itl.unwrap().count, 12);
    assert_eq!(report.e2e.unwrap().count, 6);
    // A new connection for every request.
    assert_eq!(connections.load(Ordering::SeqCst) - before, 6);
    assert_eq!(requests.load(Ordering::SeqCst), 7);
}

#[tokio::test(flavor = "current_thread")]
async fn error_statuses_are_counted_as_failures() {
    let (url, _, _) = fake_server(503).await;
    let (report, errors) = run_step(&settings(&url), 0, 3, 2).await;
    assert_eq!(
        (report.requests, report.completed, report.failed),
        (3, 0, 3)
    );
    assert!(errors[0].contains("503"), "{errors:?}");
    assert_eq!(report.ttft, None);
}

#[tokio::test(flavor = "current_thread")]
async fn a_closed_port_is_a_failure_not_a_panic() {
    // Bind, note the port, and close it: nothing listens there.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let (report, errors) = run_step(&settings(&url), 0, 2, 2).await;
    assert_eq!(report.failed, 2);
    assert!(errors[0].contains("HTTP transfer failed"), "{errors:?}");
    assert!(first_model(&url, None).await.is_err());
}
