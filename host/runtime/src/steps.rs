//! Project steps on the wasm provider, which has no shell: a step runs only when it
//! is a plain command line of the one program the project kind allows.

use std::str::SplitWhitespace;

/// Characters that make a step more than a plain command line.
const SHELL: &[char] =
    &['|', '&', ';', '<', '>', '(', ')', '$', '`', '\\', '"', '\'', '*', '?', '[', ']', '#', '~', '{', '}', '!'];

/// The arguments of `step` when it is a plain command line running `program`, with
/// none of [`SHELL`] nor of `also_refused`; otherwise why not (to follow the step).
pub(crate) fn plain_command<'s>(
    step: &'s str,
    program: &str,
    also_refused: &[char],
) -> Result<SplitWhitespace<'s>, String> {
    if step.contains(SHELL) || step.contains(also_refused) {
        return Err("uses shell syntax".into());
    }
    let mut words = step.split_whitespace();
    if words.next() != Some(program) {
        return Err(format!("is not a {program} command"));
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::plain_command;

    #[test]
    fn only_plain_command_lines_of_the_program_pass() {
        let args: Vec<&str> = plain_command("tool  a --b=c", "tool", &[]).expect("plain").collect();
        assert_eq!(args, ["a", "--b=c"]);
        assert_eq!(plain_command("tool a=b", "tool", &['=']).expect_err("refused"), "uses shell syntax");
        assert_eq!(plain_command("tool a | b", "tool", &[]).expect_err("refused"), "uses shell syntax");
        assert_eq!(plain_command("other a", "tool", &[]).expect_err("refused"), "is not a tool command");
        assert_eq!(plain_command("", "tool", &[]).expect_err("refused"), "is not a tool command");
    }
}
