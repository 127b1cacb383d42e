//! The node's command lines, read from stdin with a bound: a line longer than [`MAX_LINE`]
//! bytes, or one that is not UTF-8, is an error for that line only (the caller prints it), and
//! the next line is read as usual. Only the end of input ends the input.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest command line, in bytes (without its line feed).
pub const MAX_LINE: usize = 64 * 1024;

/// One line of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line, without its line feed (and carriage return).
    Text(String),
    /// A line of this many bytes, longer than [`MAX_LINE`]: dropped.
    TooLong(usize),
    /// A line that is not UTF-8: dropped.
    NotUtf8,
    /// The input ended.
    End,
}

impl Line {
    /// The error line the node prints for a dropped line, if this is one.
    pub fn error(&self) -> Option<String> {
        match self {
            Line::TooLong(n) => Some(format!(
                "error - line too long: {n} bytes (at most {MAX_LINE}); ignored"
            )),
            Line::NotUtf8 => Some("error - line is not UTF-8; ignored".to_owned()),
            Line::Text(_) | Line::End => None,
        }
    }
}

/// Reads [`Line`]s from `input`, keeping at most [`MAX_LINE`] bytes of a line in memory.
#[derive(Debug)]
pub struct Lines<R> {
    input: R,
    buf: Vec<u8>,
}

impl<R: AsyncBufRead + Unpin> Lines<R> {
    /// Lines of `input`.
    pub fn new(input: R) -> Lines<R> {
        Lines {
            input,
            buf: Vec::new(),
        }
    }

    /// The next line. Not cancel safe: a line being read when the future is dropped is lost.
    pub async fn next(&mut self) -> std::io::Result<Line> {
        self.buf.clear();
        let mut len = 0usize;
        loop {
            let chunk = self.input.fill_buf().await?;
            if chunk.is_empty() {
                if len == 0 {
                    return Ok(Line::End);
                }
                break;
            }
            let (part, used, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..i], i + 1, true),
                None => (chunk, chunk.len(), false),
            };
            len += part.len();
            if len <= MAX_LINE {
                self.buf.extend_from_slice(part);
            }
            self.input.consume(used);
            if done {
                break;
            }
        }
        if len > MAX_LINE {
            return Ok(Line::TooLong(len));
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        match String::from_utf8(std::mem::take(&mut self.buf)) {
            Ok(text) => Ok(Line::Text(text)),
            Err(_) => Ok(Line::NotUtf8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all(input: &[u8]) -> Vec<Line> {
        let mut lines = Lines::new(tokio::io::BufReader::with_capacity(7, input));
        let mut out = Vec::new();
        loop {
            let line = lines.next().await.unwrap();
            if line == Line::End {
                return out;
            }
            out.push(line);
        }
    }

    #[tokio::test]
    async fn a_bad_line_is_an_error_for_itself_only() {
        let long = vec![b'x'; MAX_LINE + 1];
        let mut input = b"status t1\r\n\xff\xfe\n".to_vec();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nnodes");
        assert_eq!(
            all(&input).await,
            [
                Line::Text("status t1".into()),
                Line::NotUtf8,
                Line::TooLong(MAX_LINE + 1),
                Line::Text("nodes".into()),
            ]
        );
        let exact = vec![b'y'; MAX_LINE];
        assert_eq!(
            all(&exact).await,
            [Line::Text(String::from_utf8(exact).unwrap())]
        );
    }
}
