//! sed scripts read as GNU sed reads them: addresses, regular expressions (with
//! bracket expressions), replacements and text arguments are skipped, so `s/e/E/`
//! is harmless while the `e` command or flag (runs a command) and `w`/`W` (write a
//! file) are hazards. A script that does not parse is refused by sed, but the policy
//! cannot be sure of that, so it is a hazard too.

/// Why a sed script could not be read (the policy then asks: sed would likely refuse
/// it, but the policy cannot be sure).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SedError {
    /// `N,` with nothing after the comma.
    #[error("a second address is missing")]
    MissingAddress,
    /// An address and then the end of the script.
    #[error("an address without a command")]
    NoCommand,
    /// `\` as a regex address with no delimiter after it.
    #[error("an empty address delimiter")]
    EmptyDelimiter,
    /// A `\` at the very end.
    #[error("a trailing backslash")]
    TrailingBackslash,
    /// A command letter GNU sed does not have.
    #[error("unknown command `{0}`")]
    UnknownCommand(char),
    /// A newline or backslash (or nothing) where a delimiter must be.
    #[error("a bad delimiter")]
    BadDelimiter,
    /// A regex that runs into the next line.
    #[error("a newline inside a regex")]
    NewlineInRegex,
    /// A regex or replacement without its closing delimiter.
    #[error("an unterminated `{0}`")]
    Unterminated(char),
    /// A `[:class:]` without its end.
    #[error("an unterminated class")]
    UnterminatedClass,
    /// A `[...]` without its `]`.
    #[error("an unterminated bracket expression")]
    UnterminatedBracket,
    /// Something after a command that cannot follow it.
    #[error("`{0}` after a command")]
    AfterCommand(char),
}

/// The hazards of a sed script, or why it could not be read.
pub fn hazards(script: &str) -> Result<Vec<&'static str>, SedError> {
    let mut p = Parser {
        c: script.chars().collect(),
        i: 0,
        out: Vec::new(),
    };
    p.script()?;
    p.out.sort_unstable();
    p.out.dedup();
    Ok(p.out)
}

struct Parser {
    c: Vec<char>,
    i: usize,
    out: Vec<&'static str>,
}

/// Files sed writes to without touching the file system.
const STREAMS: &[&str] = &["/dev/stdout", "/dev/stderr"];

impl Parser {
    fn peek(&self) -> Option<char> {
        self.c.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek();
        self.i += 1;
        c
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.i += 1;
        }
    }

    fn script(&mut self) -> Result<(), SedError> {
        loop {
            while matches!(self.peek(), Some(' ' | '\t' | '\n' | ';')) {
                self.i += 1;
            }
            if self.peek().is_none() {
                return Ok(());
            }
            self.command()?;
        }
    }

    fn command(&mut self) -> Result<(), SedError> {
        if self.address()? {
            self.skip_blanks();
            if self.peek() == Some(',') {
                self.i += 1;
                self.skip_blanks();
                if matches!(self.peek(), Some('+' | '~')) {
                    self.i += 1;
                }
                if !self.address()? {
                    return Err(SedError::MissingAddress);
                }
            }
        }
        self.skip_blanks();
        while self.peek() == Some('!') {
            self.i += 1;
            self.skip_blanks();
        }
        let cmd = self.bump().ok_or(SedError::NoCommand)?;
        match cmd {
            '{' => Ok(()),
            '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z'
            | 'F' => self.end_of_command(),
            'l' | 'L' | 'q' | 'Q' => {
                self.skip_blanks();
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
                self.end_of_command()
            }
            '#' => {
                self.label(true);
                Ok(())
            }
            ':' | 'b' | 't' | 'T' | 'v' => {
                self.skip_blanks();
                self.label(false);
                Ok(())
            }
            'a' | 'i' | 'c' => {
                self.text();
                Ok(())
            }
            'r' | 'R' => {
                self.filename();
                Ok(())
            }
            'w' | 'W' => {
                if !STREAMS.contains(&self.filename().as_str()) {
                    self.out.push("w (writes a file)");
                }
                Ok(())
            }
            'e' => {
                self.out.push("e (runs a command)");
                self.label(true);
                Ok(())
            }
            's' => self.substitute(),
            'y' => {
                let d = self.delimiter()?;
                self.until(d, false)?;
                self.until(d, false)?;
                self.end_of_command()
            }
            other => Err(SedError::UnknownCommand(other)),
        }
    }

    /// An optional address; true when one was read.
    fn address(&mut self) -> Result<bool, SedError> {
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '~') {
                    self.i += 1;
                }
                Ok(true)
            }
            Some('$') => {
                self.i += 1;
                Ok(true)
            }
            Some('/') => {
                self.i += 1;
                self.until('/', true)?;
                self.regex_flags();
                Ok(true)
            }
            Some('\\') => {
                self.i += 1;
                let d = self.bump().ok_or(SedError::EmptyDelimiter)?;
                self.until(d, true)?;
                self.regex_flags();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn regex_flags(&mut self) {
        while matches!(self.peek(), Some('I' | 'M')) {
            self.i += 1;
        }
    }

    fn delimiter(&mut self) -> Result<char, SedError> {
        match self.bump() {
            Some('\n' | '\\') | None => Err(SedError::BadDelimiter),
            Some(d) => Ok(d),
        }
    }

    /// Up to an unescaped `delim`; in a regex, bracket expressions may hold it.
    fn until(&mut self, delim: char, regex: bool) -> Result<(), SedError> {
        while let Some(c) = self.bump() {
            match c {
                '\\' => {
                    self.bump().ok_or(SedError::TrailingBackslash)?;
                }
                '[' if regex => self.bracket()?,
                '\n' if regex => return Err(SedError::NewlineInRegex),
                c if c == delim => return Ok(()),
                _ => {}
            }
        }
        Err(SedError::Unterminated(delim))
    }

    /// A bracket expression, from after its `[`.
    fn bracket(&mut self) -> Result<(), SedError> {
        if self.peek() == Some('^') {
            self.i += 1;
        }
        if self.peek() == Some(']') {
            self.i += 1;
        }
        while let Some(c) = self.bump() {
            match c {
                ']' => return Ok(()),
                '[' if matches!(self.peek(), Some(':' | '=' | '.')) => {
                    let kind = self.bump().unwrap_or(':');
                    loop {
                        match self.bump() {
                            Some(c) if c == kind && self.peek() == Some(']') => {
                                self.i += 1;
                                break;
                            }
                            Some(_) => {}
                            None => return Err(SedError::UnterminatedClass),
                        }
                    }
                }
                _ => {}
            }
        }
        Err(SedError::UnterminatedBracket)
    }

    fn substitute(&mut self) -> Result<(), SedError> {
        let d = self.delimiter()?;
        self.until(d, true)?;
        self.until(d, false)?;
        loop {
            match self.peek() {
                Some('g' | 'p' | 'i' | 'I' | 'm' | 'M') => self.i += 1,
                Some(c) if c.is_ascii_digit() => self.i += 1,
                Some('e') => {
                    self.i += 1;
                    self.out.push("e (runs a command)");
                }
                Some('w') => {
                    self.i += 1;
                    if !STREAMS.contains(&self.filename().as_str()) {
                        self.out.push("w (writes a file)");
                    }
                    return Ok(());
                }
                _ => return self.end_of_command(),
            }
        }
    }

    fn end_of_command(&mut self) -> Result<(), SedError> {
        self.skip_blanks();
        match self.peek() {
            None | Some(';' | '\n' | '}' | '#') => Ok(()),
            Some(c) => Err(SedError::AfterCommand(c)),
        }
    }

    /// A comment (to the end of the line), or a label: GNU sed ends it at `;` or a
    /// blank, and ending it early can only make more of the script read as commands.
    fn label(&mut self, to_line_end: bool) {
        while let Some(c) = self.peek() {
            if c == '\n' || (!to_line_end && matches!(c, ';' | ' ' | '\t')) {
                break;
            }
            self.i += 1;
        }
    }

    /// The text of `a`, `i`, `c`: to the end of the line, `\` continues it.
    fn text(&mut self) {
        while let Some(c) = self.bump() {
            match c {
                '\\' => {
                    self.bump();
                }
                '\n' => break,
                _ => {}
            }
        }
    }

    /// A file name: the rest of the line.
    fn filename(&mut self) -> String {
        self.skip_blanks();
        let start = self.i;
        self.label(true);
        self.c[start..self.i].iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::hazards;

    #[test]
    fn benign_scripts() {
        for s in [
            "s/e/E/",
            "s/exec/run/g",
            "s|/usr|/opt|g",
            "1,2p",
            "/^#/d",
            "$!N;s/\\n/ /",
            "1!G;h;$!d",
            "y/abc/xyz/",
            "s/[/]/X/",
            "/start/,/end/{s/a/b/;p}",
            "a hello; world",
            "s/x/y/w /dev/stdout",
            "# e touch M",
            ":a;N;$!ba;s/\\n/ /g",
            "b end;s/x/y/;:end",
            "\\,e,d",
            "s/a/b/2g",
            "-n",
        ]
        .iter()
        .filter(|s| !s.starts_with('-'))
        {
            assert_eq!(hazards(s), Ok(vec![]), "{s}");
        }
    }

    #[test]
    fn hazardous_scripts() {
        for s in [
            "e touch M",
            "1e touch M",
            "s/x/touch M/e",
            "s/x/y/;e touch M",
            "s/x/y/w out.txt",
            "w /tmp/x",
            "/a/W f",
            "s/[/]x/y/e",
            "1!e id",
            ":a;e touch M",
            ":a e touch M",
            "b x;w f",
        ] {
            assert!(
                hazards(s).is_ok_and(|h| !h.is_empty()),
                "{s}: {:?}",
                hazards(s)
            );
        }
        for s in ["s/a/b", "k", "s/a/b/q", "s/[a/b/"] {
            assert!(hazards(s).is_err(), "{s}");
        }
    }
}
