//! What the server's test binaries share: a server on a free loopback port with the real
//! model (SmolLM2, from `scripts/fetch-assets model`), and request helpers.
#![allow(dead_code)]

#[path = "../../../tests/support/require.rs"]
mod require;

use corral_models::{DeviceSpec, Model};
use corral_server::{ServeConfig, ServerHandle, spawn};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub fn model_path() -> PathBuf {
    let assets = std::env::var_os("CORRAL_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets"));
    require::require_input(
        assets.join("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        "run scripts/fetch-assets model",
    )
}

pub struct Server {
    pub handle: Option<ServerHandle>,
    pub base: String,
}

/// The gpt-oss tokenizer (from `scripts/fetch-assets`).
pub fn gptoss_tokenizer() -> PathBuf {
    let assets = std::env::var_os("CORRAL_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets"));
    require::require_input(
        assets.join("tokenizers/gptoss/tokenizer.json"),
        "run scripts/fetch-assets",
    )
}

impl Server {
    /// A server on a free port, once `/health` says the model is loaded.
    pub fn start(config: ServeConfig) -> Server {
        Server::start_from(config, model_path().display().to_string())
    }

    /// The same with the model at `source`.
    pub fn start_from(config: ServeConfig, source: String) -> Server {
        Server::start_with(
            config,
            Box::new(move || Model::load(&source, DeviceSpec::Cpu)),
        )
    }

    /// The same with the model `load` makes.
    pub fn start_with(config: ServeConfig, load: corral_server::Loader) -> Server {
        let config = ServeConfig { port: 0, ..config };
        let handle = spawn(config, load).expect("server starts");
        let base = format!("http://{}", handle.addr());
        let t = Instant::now();
        loop {
            match ureq::get(&format!("{base}/health")).call() {
                Ok(r) if r.status() == 200 => break,
                Err(ureq::Error::Status(503, _)) => {}
                other => panic!("unexpected /health answer: {other:?}"),
            }
            assert!(t.elapsed() < Duration::from_secs(120), "model never loaded");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server {
            handle: Some(handle),
            base,
        }
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, &body.to_string(), None)
    }

    pub fn post_raw(&self, path: &str, body: &str, key: Option<&str>) -> (u16, Value) {
        let mut req =
            ureq::post(&format!("{}{path}", self.base)).set("content-type", "application/json");
        if let Some(k) = key {
            req = req.set("authorization", &format!("Bearer {k}"));
        }
        match req.send_string(body) {
            Ok(r) => (r.status(), r.into_json().expect("JSON body")),
            Err(ureq::Error::Status(code, r)) => (code, r.into_json().expect("JSON error body")),
            Err(e) => panic!("transport error: {e}"),
        }
    }

    pub fn metric(&self, name: &str) -> f64 {
        let text = ureq::get(&format!("{}/metrics", self.base))
            .call()
            .expect("metrics")
            .into_string()
            .expect("text");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    }

    /// Polls until `cond` holds (or fails after 60 s).
    pub fn wait_for(&self, what: &str, cond: impl Fn(&Server) -> bool) {
        let t = Instant::now();
        while !cond(self) {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "timed out waiting: {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.shutdown();
        }
    }
}

pub fn chat(content: &str, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
    });
    if let Value::Object(m) = extra {
        for (k, v) in m {
            body[k] = v;
        }
    }
    body
}

pub fn content(v: &Value) -> &str {
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content in {v}"))
}

pub fn error_message(v: &Value) -> &str {
    v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error object in {v}"))
}

/// Sends `head` (and no more) on a raw connection; the first line of the answer, or
/// `None` if the server closed the connection without one. Waits at most 20 s.
pub fn raw_answer(s: &Server, head: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = s.base.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(head.as_bytes()).expect("write");
    let mut buf = vec![0u8; 512];
    let n = c
        .read(&mut buf)
        .expect("an answer or a close before the read timeout");
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    text.lines().next().map(str::to_string)
}
