//! One-shot messages after a button ("Queue ops is paused."): the POST handler stores the
//! text on the server under a random id and redirects to `…?flash=ID`; the page shows it
//! once and forgets it. A link can carry only an id, never text, and an id opens only for
//! the browser that pressed the button (it is bound to its CSRF nonce), so no one can make
//! the console show words it did not say (docs/console.md, "Access", messages).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a message waits to be shown.
const TTL: Duration = Duration::from_secs(300);
/// Messages kept at most (the oldest is dropped first).
const CAPACITY: usize = 10_000;

struct Entry {
    nonce: String,
    text: String,
    at: Instant,
}

/// The messages waiting to be shown.
#[derive(Default)]
pub struct Flashes {
    waiting: Mutex<HashMap<String, Entry>>,
}

impl Flashes {
    /// Stores `text` for the browser with CSRF nonce `nonce`; returns the id for the URL.
    pub fn put(&self, nonce: &str, text: String) -> String {
        let id = hex::encode(rand::random::<[u8; 16]>());
        let now = Instant::now();
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if w.len() >= CAPACITY {
            w.retain(|_, e| now.duration_since(e.at) < TTL);
        }
        if w.len() >= CAPACITY
            && let Some(k) = w.iter().min_by_key(|(_, e)| e.at).map(|(k, _)| k.clone())
        {
            w.remove(&k);
        }
        w.insert(
            id.clone(),
            Entry {
                nonce: nonce.to_string(),
                text,
                at: now,
            },
        );
        id
    }

    /// The message `id` for the browser with `nonce`, once (then it is gone).
    pub fn take(&self, nonce: &str, id: Option<&str>) -> Option<String> {
        let id = id?;
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = w
            .get(id)
            .is_some_and(|e| e.nonce == nonce && e.at.elapsed() < TTL);
        if fresh {
            w.remove(id).map(|e| e.text)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_shows_once_and_only_in_its_own_browser() {
        let f = Flashes::default();
        let id = f.put("nonce-a", "Queue ops is paused.".into());
        assert_eq!(f.take("nonce-b", Some(&id)), None, "another browser");
        assert_eq!(f.take("nonce-a", Some("made-up")), None);
        assert_eq!(f.take("nonce-a", None), None);
        assert_eq!(
            f.take("nonce-a", Some(&id)).as_deref(),
            Some("Queue ops is paused.")
        );
        assert_eq!(f.take("nonce-a", Some(&id)), None, "once");
        for i in 0..CAPACITY + 5 {
            f.put("n", format!("{i}"));
        }
        assert!(f.waiting.lock().unwrap().len() <= CAPACITY);
    }
}
