//! Everything the binary prints goes through here: control characters from a model (a node name
//! holding ESC, CR or BEL could move the cursor, erase lines or set a terminal's title) are
//! escaped, and a failed write to standard output is an error the caller returns rather than a
//! panic.
//!
//! `main` ends quietly (exit 0) when standard output is a closed pipe (`multigather inspect m.onnx
//! | head`, as a filter does) and reports any other write failure (`> /dev/full`) with exit 2.

use std::borrow::Cow;
use std::io::Write;

use anyhow::Result;

/// A write to standard output failed; `main` tells a closed pipe from other failures.
#[derive(Debug)]
pub struct StdoutError(pub std::io::Error);

impl std::fmt::Display for StdoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writing to standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutError {}

/// Whether `e` is a write to standard output that failed because the reader went away.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<StdoutError>()
            .is_some_and(|s| s.0.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Prints `text` on standard output, control characters escaped, and flushes it so a full device
/// is reported here and not lost at exit.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(printable(text).as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| StdoutError(e).into())
}

/// Prints `text` and a newline on standard output (see [`print()`]).
pub fn println(text: &str) -> Result<()> {
    print(&format!("{text}\n"))
}

/// Prints `value` as JSON and a newline on standard output (indented with `pretty`). Characters
/// a terminal would act on are written as JSON escapes (`\u202e`), so the text stays valid JSON
/// and reads back as the same value.
pub fn println_json(value: &impl serde::Serialize, pretty: bool) -> Result<()> {
    let json = if pretty {
        serde_json::to_string_pretty(value)?
    } else {
        serde_json::to_string(value)?
    };
    let mut text = terminal_safe_json(&json);
    text.push('\n');
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| StdoutError(e).into())
}

/// JSON text with every character [`is_escaped`] names written as a JSON escape. Outside
/// strings JSON has only ASCII punctuation and whitespace, so such a character is inside one,
/// where any character may be written as escapes of its UTF-16 units.
fn terminal_safe_json(json: &str) -> String {
    let mut text = String::with_capacity(json.len() + 1);
    for c in json.chars() {
        if is_escaped(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                text.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            text.push(c);
        }
    }
    text
}

/// Whether a terminal could act on `c`: every control character but newline and tab, and the
/// bidirectional-text overrides that reorder what it shows.
fn is_escaped(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Prints `text` and a newline on standard error, control characters escaped. A failure to write
/// there has nowhere to be reported and is ignored.
pub fn eprintln(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(format!("{}\n", printable(text)).as_bytes());
}

/// `text` with every control character but newline and tab, and the bidirectional-text overrides
/// that reorder what a terminal shows, written as a visible escape (`\x1b`, `\u{202e}`).
pub fn printable(text: &str) -> Cow<'_, str> {
    let escaped = is_escaped;
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !escaped(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_are_escaped() {
        for (raw, shown) in [
            ("plain name", "plain name"),
            ("two\nlines\tand tab", "two\nlines\tand tab"),
            ("\x1b[2Kerased", "\\x1b[2Kerased"),
            ("title\x1b]0;pwned\x07", "title\\x1b]0;pwned\\x07"),
            ("back\rover", "back\\x0dover"),
            ("del\x7f", "del\\x7f"),
            ("c1\u{9b}31m", "c1\\u{9b}31m"),
            ("abc\u{202e}fed", "abc\\u{202e}fed"),
        ] {
            assert_eq!(printable(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn json_escapes_are_json() {
        let name = "abc\u{202e}fed\u{9b}\x1b\x7f\u{1F600}";
        let text = super::terminal_safe_json(&serde_json::to_string(&name).unwrap());
        assert!(!text.chars().any(super::is_escaped), "{text}");
        assert_eq!(serde_json::from_str::<String>(&text).unwrap(), name);
    }
}
