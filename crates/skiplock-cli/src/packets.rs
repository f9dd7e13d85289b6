//! `skiplock packet …`: submit, list (with the "whose move is it?" line), show (with its
//! history), take, complete, retry.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::connect_migrated;
use super::output::{print_json, print_table, say, truncate, ts};
use skiplock_workflows::packets::roots::{self, PacketRoots};
use skiplock_workflows::packets::{self, WhoseMove, transitions::PacketState};

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
        /// The packet's folder, inside SKIPLOCK_PACKET_ROOTS (resolved to its real path;
        /// workers must see the same path).
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

/// The folder to submit: `path` made absolute and resolved to its real path, which must
/// be a folder inside `roots` (the same check the worker makes before reading it). Refused
/// at once, in one line, so a bad path never becomes a packet.
fn source_path(path: &Path, roots: &PacketRoots) -> anyhow::Result<String> {
    let shown = path.display();
    let real = std::fs::canonicalize(path)
        .map_err(|e| anyhow::anyhow!("cannot use packet folder {shown}: {e}"))?;
    let s = real
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("the path {shown} is not valid UTF-8"))?;
    if roots.root_of(&real).is_none() {
        anyhow::bail!(
            "packet folder {shown} is outside {} ({}); packets are read only from folders inside it",
            roots::SETTING,
            roots
                .paths()
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    roots.check(s).map_err(|m| anyhow::anyhow!(m))?;
    Ok(s.to_string())
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
            let source = source_path(&path, &PacketRoots::from_env()?)?;
            let id = packets::submit(&pool, &source, name.as_deref(), who.as_deref()).await?;
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
            let p = packets::get(&pool, id).await?;
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
            packets::take(&pool, id, who.as_deref()).await?;
            say!("packet {id}: in_review");
        }
        PacketCommand::Complete { id } => {
            packets::complete(&pool, id, who.as_deref()).await?;
            say!("packet {id}: done");
        }
        PacketCommand::Retry { id, reason } => {
            let job = packets::retry(&pool, id, reason.as_deref(), who.as_deref()).await?;
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
    fn submitted_paths_resolve_to_real_folders_inside_the_roots() {
        let base = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(base.path()).unwrap().join("root");
        std::fs::create_dir_all(root.join("reel1")).unwrap();
        std::os::unix::fs::symlink(root.join("reel1"), root.join("alias")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
        let roots = PacketRoots::new(&[&root]);
        let want = root.join("reel1").to_str().unwrap().to_string();
        assert_eq!(source_path(&root.join("reel1"), &roots).unwrap(), want);
        assert_eq!(source_path(&root.join("alias"), &roots).unwrap(), want);
        assert_eq!(
            source_path(&root.join("reel1/../reel1"), &roots).unwrap(),
            want
        );
        for bad in [
            root.join("etc"),
            root.join("../"),
            PathBuf::from("/etc"),
            root.join("missing"),
        ] {
            let e = source_path(&bad, &roots).unwrap_err().to_string();
            assert!(
                e.contains("SKIPLOCK_PACKET_ROOTS") || e.contains("No such file"),
                "{}: {e}",
                bad.display()
            );
        }
    }
}
