//! awk programs read as awk reads them: strings, regular expressions and comments are
//! skipped, so `gsub(/e/, "|")` is harmless while `print | "sh"`, `"cmd" | getline`,
//! `system(…)` and `print > "file"` are hazards.
//!
//! A program this lexer cannot read (an unterminated string, say) is itself a hazard:
//! asking is the safe answer to text nobody understood.

/// The hazards in an awk program, by short name.
pub fn hazards(program: &str) -> Vec<&'static str> {
    match lex(program) {
        Ok(tokens) => scan(&tokens),
        Err(()) => vec!["program not understood"],
    }
}

#[derive(Debug, PartialEq)]
enum Tok {
    Name(String),
    Str(String),
    Operand,
    Op(&'static str),
    Char(char),
    /// A statement end: newline or `;`.
    End,
}

const KEYWORDS: &[&str] = &[
    "print",
    "printf",
    "return",
    "in",
    "case",
    "do",
    "else",
    "if",
    "while",
    "for",
    "exit",
    "delete",
    "next",
    "nextfile",
    "function",
    "func",
    "BEGIN",
    "END",
    "BEGINFILE",
    "ENDFILE",
    "switch",
    "default",
];

const OPS: &[&str] = &[
    ">>", "|&", "||", "&&", "==", "<=", ">=", "!=", "++", "--", "+=", "-=", "*=", "/=", "%=", "^=",
    "**", "!~",
];

fn lex(src: &str) -> Result<Vec<Tok>, ()> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let operand_before = matches!(
            out.last(),
            Some(Tok::Name(n)) if !KEYWORDS.contains(&n.as_str())
        ) || matches!(
            out.last(),
            Some(Tok::Str(_) | Tok::Operand | Tok::Char(')' | ']' | '$') | Tok::Op("++" | "--"))
        );
        match c {
            ' ' | '\t' | '\r' => i += 1,
            '\\' if chars.get(i + 1) == Some(&'\n') => i += 2,
            '\n' | ';' => {
                out.push(Tok::End);
                i += 1;
            }
            '#' => {
                while chars.get(i).is_some_and(|&c| c != '\n') {
                    i += 1;
                }
            }
            '"' => {
                let (s, next) = string(&chars, i + 1)?;
                out.push(Tok::Str(s));
                i = next;
            }
            '/' if !operand_before => {
                i = regex(&chars, i + 1)?;
                out.push(Tok::Operand);
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while chars
                    .get(i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
                {
                    i += 1;
                }
                out.push(Tok::Name(chars[start..i].iter().collect()));
            }
            c if c.is_ascii_digit() || c == '.' => {
                while chars
                    .get(i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '.')
                {
                    i += 1;
                }
                out.push(Tok::Operand);
            }
            _ => {
                let two: String = chars[i..chars.len().min(i + 2)].iter().collect();
                if let Some(op) = OPS.iter().find(|o| **o == two) {
                    out.push(Tok::Op(op));
                    i += 2;
                } else if "{}()[],$+-*/%^!<>=?:~|&@".contains(c) {
                    out.push(Tok::Char(c));
                    i += 1;
                } else {
                    return Err(());
                }
            }
        }
    }
    Ok(out)
}

/// A string literal from after its opening quote; returns it and the index past it.
fn string(chars: &[char], mut i: usize) -> Result<(String, usize), ()> {
    let mut s = String::new();
    while let Some(&c) = chars.get(i) {
        match c {
            '\\' => {
                s.push(*chars.get(i + 1).ok_or(())?);
                i += 2;
            }
            '"' => return Ok((s, i + 1)),
            '\n' => return Err(()),
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    Err(())
}

/// A regex literal from after its opening slash; returns the index past it. A `/`
/// inside a bracket expression does not end it.
fn regex(chars: &[char], mut i: usize) -> Result<usize, ()> {
    let mut bracket = false;
    while let Some(&c) = chars.get(i) {
        match c {
            '\\' => i += 2,
            '\n' => return Err(()),
            '[' if !bracket => {
                bracket = true;
                i += 1;
                if chars.get(i) == Some(&'^') {
                    i += 1;
                }
                if chars.get(i) == Some(&']') {
                    i += 1;
                }
            }
            ']' if bracket => {
                bracket = false;
                i += 1;
            }
            '/' if !bracket => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(())
}

fn scan(tokens: &[Tok]) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    // The paren depth of the print statement we are in, if any.
    let mut print_depth: Option<i32> = None;
    for (i, t) in tokens.iter().enumerate() {
        let next = tokens.get(i + 1);
        match t {
            Tok::Name(n) if n == "system" => out.push("system()"),
            Tok::Name(n) if n == "print" || n == "printf" => print_depth = Some(depth),
            Tok::Char('(') | Tok::Char('[') => depth += 1,
            Tok::Char(')') | Tok::Char(']') => depth -= 1,
            Tok::Char('{') | Tok::Char('}') | Tok::End => print_depth = None,
            Tok::Char('|') => out.push("pipe"),
            Tok::Op("|&") => out.push("coprocess"),
            Tok::Char('@') => out.push("@ directive or indirect call"),
            Tok::Char('>') | Tok::Op(">>") if print_depth == Some(depth) => {
                let harmless = matches!(next, Some(Tok::Str(s)) if matches!(s.as_str(), "/dev/stdout" | "/dev/stderr" | "/dev/null"));
                if !harmless {
                    out.push("output redirection");
                }
            }
            _ => {}
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::hazards;

    #[test]
    fn benign_programs() {
        for p in [
            "{print $1}",
            "BEGIN{x=1} {x+=$1} END{print x}",
            "$1 > 2 {print}",
            "{print ($1 > 2)}",
            "/foo|bar/ {print}",
            "{gsub(/e/, \"|\"); print}",
            "{ print $1 > \"/dev/stderr\" }",
            "{ n = NF / 2; print n }",
            "# system(\"x\")\n{print}",
            "{ if (a > b) print a; else print b }",
            "{ print length($0) }",
            "$0 ~ /[/]x/ { print }",
            "{ getline line < \"file\"; print line }",
        ] {
            assert_eq!(hazards(p), Vec::<&str>::new(), "{p}");
        }
    }

    #[test]
    fn hazardous_programs() {
        for (p, h) in [
            ("BEGIN{system(\"touch M\")}", "system()"),
            ("BEGIN { system (\"x\") }", "system()"),
            ("{print | \"sh\"}", "pipe"),
            ("BEGIN{\"date\" | getline d}", "pipe"),
            ("{print > \"out\"}", "output redirection"),
            ("{print $1, $2 >> $3}", "output redirection"),
            ("{printf(\"%s\", $1) > \"f\"}", "output redirection"),
            ("{print a > b ? c : d}", "output redirection"),
            (
                "BEGIN{f=\"system\"; @f(\"x\")}",
                "@ directive or indirect call",
            ),
            ("@load \"filefuncs\"", "@ directive or indirect call"),
            ("{ print |& \"cat\" }", "coprocess"),
            ("{ x = 1 / 2; system(\"y\") }", "system()"),
            ("BEGIN{print \"x", "program not understood"),
        ] {
            assert!(hazards(p).contains(&h), "{p}: {:?}", hazards(p));
        }
    }
}
