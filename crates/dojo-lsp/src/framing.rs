//! JSON-RPC base protocol framing: `Content-Length: N\r\n\r\n<N bytes of JSON>`.
//!
//! Kept separate from the client so the parser can be property-tested against arbitrary chunking
//! of the byte stream (servers write frames in whatever pieces their runtime flushes).

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// Largest frame we accept; a server answering more than this is broken or hostile.
pub const MAX_FRAME: usize = 256 << 20;

/// Encode one message as a frame.
pub fn encode(msg: &serde_json::Value) -> Vec<u8> {
    let body = msg.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Why reading a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("server closed its output")]
    Eof,
    #[error("reading server output: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame header {0:?}")]
    BadHeader(String),
    #[error("frame has no Content-Length header")]
    NoLength,
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    #[error("frame body is not JSON: {0}")]
    BadJson(#[from] serde_json::Error),
}

/// Read one frame. Headers other than Content-Length (Content-Type) are ignored.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    r: &mut R,
) -> Result<serde_json::Value, FrameError> {
    let mut len: Option<usize> = None;
    let mut line = String::new();
    let mut first = true;
    loop {
        line.clear();
        let n = r.read_line(&mut line).await?;
        if n == 0 {
            return Err(if first {
                FrameError::Eof
            } else {
                FrameError::BadHeader("EOF in headers".into())
            });
        }
        first = false;
        let trimmed = line.trim_end_matches(['\r', '\n']);
        if trimmed.is_empty() {
            break;
        }
        let Some((name, value)) = trimmed.split_once(':') else {
            return Err(FrameError::BadHeader(trimmed.to_string()));
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            let v: usize = value
                .trim()
                .parse()
                .map_err(|_| FrameError::BadHeader(trimmed.to_string()))?;
            if v > MAX_FRAME {
                return Err(FrameError::TooLarge(v));
            }
            len = Some(v);
        }
    }
    let len = len.ok_or(FrameError::NoLength)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(serde_json::from_slice(&body)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::{AsyncRead, BufReader, ReadBuf};

    /// A reader that hands out the bytes in fixed-size chunks, like a pipe under load.
    struct Chunked {
        data: Vec<u8>,
        pos: usize,
        chunk: usize,
    }

    impl AsyncRead for Chunked {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = self
                .chunk
                .min(buf.remaining())
                .min(self.data.len() - self.pos);
            let start = self.pos;
            buf.put_slice(&self.data[start..start + n]);
            self.pos += n;
            Poll::Ready(Ok(()))
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            ".*".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                prop::collection::btree_map("[a-z$/]{0,8}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn frames_roundtrip_under_any_chunking(msgs in prop::collection::vec(json_value(), 1..5), chunk in 1usize..64) {
            let mut data = Vec::new();
            for m in &msgs {
                data.extend(encode(m));
            }
            let got = rt().block_on(async {
                let mut r = BufReader::new(Chunked { data, pos: 0, chunk });
                let mut got = Vec::new();
                loop {
                    match read_frame(&mut r).await {
                        Ok(v) => got.push(v),
                        Err(FrameError::Eof) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                got
            });
            prop_assert_eq!(got, msgs);
        }

        #[test]
        fn garbage_never_panics(data in prop::collection::vec(any::<u8>(), 0..200)) {
            rt().block_on(async {
                let mut r = BufReader::new(&data[..]);
                for _ in 0..4 {
                    if read_frame(&mut r).await.is_err() {
                        break;
                    }
                }
            });
        }
    }

    #[test]
    fn extra_headers_are_ignored() {
        let raw = b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}";
        let v = rt()
            .block_on(read_frame(&mut BufReader::new(&raw[..])))
            .unwrap();
        assert_eq!(v, serde_json::json!({}));
    }

    #[test]
    fn missing_length_is_an_error() {
        let raw = b"Content-Type: x\r\n\r\n{}";
        let e = rt()
            .block_on(read_frame(&mut BufReader::new(&raw[..])))
            .unwrap_err();
        assert!(matches!(e, FrameError::NoLength), "{e}");
    }
}
