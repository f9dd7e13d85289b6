//! `skiplock packet …`: submit, list (with the "whose move is it?" line), show (with its
//! history), take, complete, retry.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};

use super::connect_migrated;
use super::jobs::sql_api_error;
use super::output::{print_json, print_table, say, truncate, ts};
use crate::workflows::packets::{self, WhoseMove, transitions::PacketState};

/// `skiplock packet SUBCOMMAND`.
#[derive(Debug, Args)]
pub struct PacketArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: PacketCommand,
}

/// The packet subcommands.
#[derive(Debug, Subcommand)]
pub enum PacketCommand {
    /// Submit a folder as a packet (queued; processing starts by itself). Prints its id.
    Submit {
        /// The packet's folder (made absolute; workers must see the same path).
        path: PathBuf,
        /// A label for people.
        #[arg(long)]
        name: Option<String>,
    },
    /// List packets, newest first, and whose move it is.
    List {
        /// Only packets in this state (queued, processing, ready_for_review, in_review, done, error).
        #[arg(long)]
        state: Option<String>,
        /// At most this many rows.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one packet with its history.
    Show {
        /// Packet id.
        id: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Take a packet for review (ready_for_review → in_review).
    Take {
        /// Packet id.
        id: i64,
    },
    /// Finish the review (in_review → done).
    Complete {
        /// Packet id.
        id: i64,
    },
    /// Process a packet again (error or in_review → queued).
    Retry {
        /// Packet id.
        id: i64,
        /// Why (reshoot, edited frames, rejected type…), kept in the history.
        #[arg(long)]
        reason: Option<String>,
    },
}

/// Who is acting, for the history: the login name, else the database user.
fn actor() -> Option<String> {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
}

fn absolute(path: &Path) -> anyhow::Result<String> {
    let p = match std::fs::canonicalize(path) {
        Ok(p) => p,
        Err(_) if path.is_absolute() => path.to_path_buf(),
        Err(_) => std::env::current_dir()
            .context("reading the current directory")?
            .join(path),
    };
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("the path {} is not valid UTF-8", p.display()))
}

/// The "whose move is it?" line.
pub fn whose_move_line(w: &WhoseMove) -> String {
    format!(
        "whose move: machine {} (queued {}, processing {}) · people {} (ready_for_review {}, in_review {}, error {}) · done {}",
        w.machine,
        w.queued,
        w.processing,
        w.people,
        w.ready_for_review,
        w.in_review,
        w.error,
        w.done
    )
}

/// Runs `skiplock packet`.
pub async fn run(url: Option<&str>, a: PacketArgs) -> anyhow::Result<()> {
    let pool = connect_migrated(url).await?;
    let who = actor();
    match a.command {
        PacketCommand::Submit { path, name } => {
            let source = absolute(&path)?;
            let id = packets::submit(&pool, &source, name.as_deref(), who.as_deref())
                .await
                .map_err(sql_api_error)?;
            say!("{id}");
        }
        PacketCommand::List { state, limit, json } => {
            super::check_flag("--limit", limit.into(), 1, super::MAX_LIMIT)?;
            let state: Option<PacketState> = state
                .map(|s| {
                    s.parse()
                        .map_err(|e: String| anyhow::anyhow!("invalid --state: {e}"))
                })
                .transpose()?;
            let rows = packets::list(&pool, state, limit).await?;
            let w = packets::whose_move(&pool).await?;
            if json {
                return print_json(&serde_json::json!({ "packets": rows, "whose_move": w }));
            }
            let table: Vec<Vec<String>> = rows
                .iter()
                .map(|p| {
                    vec![
                        p.id.to_string(),
                        p.state.to_string(),
                        p.name.clone().unwrap_or_else(|| "-".into()),
                        truncate(&p.source, 50),
                        ts(Some(p.updated_at)),
                        p.error
                            .as_deref()
                            .map(|e| truncate(e.lines().last().unwrap_or(""), 60))
                            .unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(
                &["ID", "STATE", "NAME", "SOURCE", "UPDATED", "ERROR"],
                &table,
            );
            say!("{}", whose_move_line(&w));
        }
        PacketCommand::Show { id, json } => {
            let p = packets::get(&pool, id).await.map_err(sql_api_error)?;
            let history = packets::events(&pool, id).await?;
            if json {
                return print_json(&serde_json::json!({ "packet": p, "history": history }));
            }
            say!("id:       {}", p.id);
            say!("name:     {}", p.name.as_deref().unwrap_or("-"));
            say!("source:   {}", p.source);
            say!("state:    {}", p.state);
            say!(
                "job:      {}",
                p.job_id
                    .map(|j| j.to_string())
                    .unwrap_or_else(|| "-".into())
            );
            say!("created:  {}", ts(Some(p.created_at)));
            say!("updated:  {}", ts(Some(p.updated_at)));
            if let Some(e) = &p.error {
                say!("error:    {e}");
            }
            if let Some(r) = &p.result {
                say!("result:   {}", truncate(&r.to_string(), 2000));
            }
            say!("");
            let rows: Vec<Vec<String>> = history
                .iter()
                .map(|e| {
                    vec![
                        ts(Some(e.at)),
                        e.from
                            .map(|s| s.to_string())
                            .unwrap_or_else(|| "(submit)".into()),
                        e.to.to_string(),
                        e.actor.clone(),
                        e.note.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(&["AT", "FROM", "TO", "ACTOR", "NOTE"], &rows);
        }
        PacketCommand::Take { id } => {
            packets::take(&pool, id, who.as_deref())
                .await
                .map_err(sql_api_error)?;
            say!("packet {id}: in_review");
        }
        PacketCommand::Complete { id } => {
            packets::complete(&pool, id, who.as_deref())
                .await
                .map_err(sql_api_error)?;
            say!("packet {id}: done");
        }
        PacketCommand::Retry { id, reason } => {
            let job = packets::retry(&pool, id, reason.as_deref(), who.as_deref())
                .await
                .map_err(sql_api_error)?;
            say!("packet {id}: queued (job {job})");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whose_move_line_splits_machine_and_people() {
        let w = WhoseMove {
            machine: 3,
            people: 4,
            queued: 2,
            processing: 1,
            ready_for_review: 1,
            in_review: 2,
            error: 1,
            done: 5,
        };
        assert_eq!(
            whose_move_line(&w),
            "whose move: machine 3 (queued 2, processing 1) · people 4 (ready_for_review 1, in_review 2, error 1) · done 5"
        );
    }

    #[test]
    fn relative_paths_become_absolute() {
        let p = absolute(Path::new("no/such/dir")).unwrap();
        assert!(Path::new(&p).is_absolute() && p.ends_with("no/such/dir"));
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            absolute(d.path()).unwrap(),
            std::fs::canonicalize(d.path()).unwrap().to_str().unwrap()
        );
    }
}
