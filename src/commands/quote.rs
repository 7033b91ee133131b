//! Words quoted for bash, so that `bash -c LINE` sees exactly the words it was given:
//! `toolvisor exec -- CMD ARGS…` joins its arguments into one command line, and a
//! wrapped hook command becomes `toolvisor exec -- bash -c '<command>'`.

/// Characters that never mean anything to bash inside a word.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./@%+=:,".contains(c)
}

/// One word as bash reads it back: plain words as they are, anything else in single
/// quotes (a `'` inside becomes `'\''`). A word must not hold a NUL (no argv can).
pub fn word(w: &str) -> String {
    if !w.is_empty() && w.chars().all(plain) {
        return w.to_owned();
    }
    format!("'{}'", w.replace('\'', r"'\''"))
}

/// The words as one command line, each quoted.
pub fn line<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| word(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// What bash makes of `line`: its words, one per NUL.
    fn bash_words(line: &str) -> Vec<String> {
        let script = format!("printf '%s\\0' {line}");
        let out = Command::new("bash")
            .args(["--norc", "--noprofile", "-c", &script])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run bash");
        assert!(out.status.success(), "{line}");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        let mut words: Vec<String> = text.split('\0').map(str::to_owned).collect();
        words.pop();
        words
    }

    #[test]
    fn plain_words_stay_as_they_are() {
        assert_eq!(line(&["ls", "-la", "src/a.rs"]), "ls -la src/a.rs");
        assert_eq!(word(""), "''");
        assert_eq!(word("it's"), r"'it'\''s'");
    }

    #[test]
    fn bash_reads_back_exactly_the_words_given() {
        // Generated words from characters that mean something to bash, in every
        // position: spaces, quotes, $, backslashes, newlines, globs, braces, tildes.
        let alphabet: Vec<char> = " '\"$`\\\n\t*?[]{}~!#&;|<>()=%^,.-_aZ9é".chars().collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..40 {
            let words: Vec<String> = (0..1 + next() % 5)
                .map(|_| {
                    (0..next() % 9)
                        .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                        .collect()
                })
                .collect();
            assert_eq!(bash_words(&line(&words)), words, "{}", line(&words));
        }
    }

    #[test]
    fn a_quoted_command_runs_as_written_under_bash_c() {
        let cmd = "printf '%s|' \"$HOME\" 'a b' $'x\\ty'; echo *.nothing";
        let wrapped = line(&["bash", "-c", cmd]);
        let direct = Command::new("bash").args(["-c", cmd]).output().unwrap();
        let via = Command::new("bash")
            .args(["-c", &wrapped])
            .output()
            .unwrap();
        assert_eq!(direct.stdout, via.stdout);
    }
}
