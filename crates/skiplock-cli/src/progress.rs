//! Progress of long command-line work (a drain with `--exit-when-idle`, `bench`, `chaos`,
//! `reap`): an indicatif bar or spinner on stderr when stderr is a terminal, and plain lines
//! (or nothing extra) when it is not, so logs and CI output stay as they were.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether to draw: only on a terminal, and not on one that cannot redraw (`TERM=dumb`).
pub fn enabled(stderr_is_terminal: bool, term: Option<&str>) -> bool {
    stderr_is_terminal && term != Some("dumb")
}

fn draw_here() -> bool {
    enabled(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var("TERM").ok().as_deref(),
    )
}

/// A bar, a spinner, or nothing (not a terminal). Cheap to clone (one shared bar).
#[derive(Clone)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("drawn", &self.bar.is_some())
            .finish()
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::hidden()
    }
}

impl Progress {
    /// Draws nothing.
    pub fn hidden() -> Progress {
        Progress { bar: None }
    }

    /// A bar counting to `len` (`what` names the count), on a terminal.
    pub fn bar(len: u64, what: &str) -> Progress {
        if !draw_here() {
            return Progress::hidden();
        }
        let style = ProgressStyle::with_template(
            "{prefix} [{bar:40.cyan/blue}] {human_pos}/{human_len} · {elapsed_precise} · eta {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
            .with_style(style)
            .with_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar: Some(bar) }
    }

    /// A spinner with the elapsed time and a message, on a terminal.
    pub fn spinner(what: &str) -> Progress {
        if !draw_here() {
            return Progress::hidden();
        }
        let style = ProgressStyle::with_template("{spinner} {prefix} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
            .with_style(style)
            .with_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress { bar: Some(bar) }
    }

    /// Whether anything is drawn.
    pub fn is_drawn(&self) -> bool {
        self.bar.is_some()
    }

    /// Sets the position (and grows the length if the position passed it).
    pub fn set(&self, pos: u64) {
        if let Some(b) = &self.bar {
            if b.length().is_some_and(|l| pos > l) {
                b.set_length(pos);
            }
            b.set_position(pos);
        }
    }

    /// Sets position and length together.
    pub fn set_of(&self, pos: u64, len: u64) {
        if let Some(b) = &self.bar {
            b.set_length(len.max(pos));
            b.set_position(pos);
        }
    }

    /// The text after the bar.
    pub fn message(&self, m: impl Into<String>) {
        if let Some(b) = &self.bar {
            b.set_message(m.into());
        }
    }

    /// A line for people: above the bar on a terminal, a plain stderr line elsewhere.
    pub fn line(&self, l: &str) {
        match &self.bar {
            Some(b) => b.println(l),
            None => eprintln!("{l}"),
        }
    }

    /// Stops drawing and leaves the final state on screen.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish();
        }
    }

    /// Stops drawing and removes the bar.
    pub fn clear(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Counts a drain from samples of how much work remains: `done` only grows (by what
/// disappeared since the last sample), and work that arrives meanwhile grows the total.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainCount {
    done: u64,
    last: Option<u64>,
}

impl DrainCount {
    /// Takes a sample of the remaining work; returns (done, total).
    pub fn sample(&mut self, remaining: u64) -> (u64, u64) {
        if let Some(last) = self.last
            && remaining < last
        {
            self.done += last - remaining;
        }
        self.last = Some(remaining);
        (self.done, self.done + remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_only_on_a_terminal_that_can_redraw() {
        assert!(enabled(true, Some("xterm-256color")));
        assert!(enabled(true, None));
        assert!(!enabled(true, Some("dumb")));
        assert!(!enabled(false, Some("xterm")));
        // Off a terminal nothing is drawn and every call is harmless.
        let p = Progress::hidden();
        assert!(!p.is_drawn());
        p.set(5);
        p.set_of(1, 2);
        p.message("x");
        p.finish();
        p.clear();
    }

    #[test]
    fn a_drain_counts_what_disappeared_and_grows_with_new_work() {
        let mut c = DrainCount::default();
        assert_eq!(c.sample(100), (0, 100));
        assert_eq!(c.sample(60), (40, 100));
        assert_eq!(c.sample(60), (40, 100));
        // 30 new jobs arrive while 10 finish: the total grows, done never goes back.
        assert_eq!(c.sample(80), (40, 120));
        assert_eq!(c.sample(0), (120, 120));
    }
}
