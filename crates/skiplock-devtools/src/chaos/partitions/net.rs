//! The links of a partition run: each worker process in a network namespace of its own,
//! joined to the host by a veth pair, reaching Postgres on the host's end of its pair. Faults
//! are made inside the worker's namespace (its own firewall and queueing rules, so nothing of
//! the host's changes): `iptables` drops both ways or only the server's packets, random loss
//! (and `tc netem` delay and jitter where the kernel has it), and resets by `ss -K`.
//!
//! Every name starts with `slf` and a tag of the run, every address is in 10.231.0.0/16; a
//! run removes what an earlier crashed run of the same tag left ([`Links::clean`]) and
//! everything it made when it is dropped.

use std::process::{Command, Stdio};

use skiplock::error::{Error, Result};

/// The prefix of every namespace and interface a partition run makes.
pub const PREFIX: &str = "slf";

/// One worker's link.
#[derive(Debug, Clone)]
pub struct Link {
    /// The namespace the worker runs in.
    pub netns: String,
    /// The host's end of the veth pair.
    pub host_if: String,
    /// The namespace's end.
    pub ns_if: String,
    /// The host's address (Postgres listens on it).
    pub host_addr: String,
    /// The worker's address.
    pub ns_addr: String,
}

/// The links of a run; removed on drop.
pub struct Links {
    tag: char,
    /// One per worker slot.
    pub links: Vec<Link>,
    /// Whether the kernel has `tc netem` (else the slow link is loss alone).
    pub netem: bool,
}

/// Runs a command, failing with its stderr.
pub fn sh(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Other(format!("{program}: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Other(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Why this machine cannot run the partition faults (`None`: it can): not root, a missing
/// tool, or namespaces forbidden.
pub fn unsupported() -> Option<String> {
    for tool in ["ip", "iptables", "ss", "tc"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("{tool} is not installed (iproute2, iptables)"));
        }
    }
    let probe = format!("{PREFIX}probe{}", std::process::id() % 100_000);
    match sh("ip", &["netns", "add", &probe]) {
        Ok(_) => {
            let _ = sh("ip", &["netns", "del", &probe]);
            None
        }
        Err(e) => Some(format!("network namespaces are not allowed here: {e}")),
    }
}

impl Links {
    /// Makes `workers` links for run tag `tag` (one lower-case letter): namespace
    /// `slf<tag><i>`, host address `10.231.<base + i>.1`, worker address `….2`.
    pub fn create(tag: char, base: u8, workers: usize) -> Result<Links> {
        Links::clean(tag);
        let mut links = Links {
            tag,
            links: Vec::new(),
            netem: false,
        };
        for i in 0..workers {
            let net = base as usize + i;
            let l = Link {
                netns: format!("{PREFIX}{tag}{i}"),
                host_if: format!("{PREFIX}{tag}{i}h"),
                ns_if: format!("{PREFIX}{tag}{i}n"),
                host_addr: format!("10.231.{net}.1"),
                ns_addr: format!("10.231.{net}.2"),
            };
            sh("ip", &["netns", "add", &l.netns])?;
            links.links.push(l.clone());
            sh(
                "ip",
                &[
                    "link", "add", &l.host_if, "type", "veth", "peer", "name", &l.ns_if,
                ],
            )?;
            sh("ip", &["link", "set", &l.ns_if, "netns", &l.netns])?;
            sh(
                "ip",
                &[
                    "addr",
                    "add",
                    &format!("{}/24", l.host_addr),
                    "dev",
                    &l.host_if,
                ],
            )?;
            sh("ip", &["link", "set", &l.host_if, "up"])?;
            sh(
                "ip",
                &[
                    "-n",
                    &l.netns,
                    "addr",
                    "add",
                    &format!("{}/24", l.ns_addr),
                    "dev",
                    &l.ns_if,
                ],
            )?;
            sh("ip", &["-n", &l.netns, "link", "set", &l.ns_if, "up"])?;
            sh("ip", &["-n", &l.netns, "link", "set", "lo", "up"])?;
        }
        if let Some(l) = links.links.first() {
            let probe = l.ns_exec(&[
                "tc", "qdisc", "add", "dev", &l.ns_if, "root", "netem", "delay", "1ms",
            ]);
            links.netem = probe.is_ok();
            if links.netem {
                let _ = l.ns_exec(&["tc", "qdisc", "del", "dev", &l.ns_if, "root"]);
            }
        }
        Ok(links)
    }

    /// Removes the namespaces and host interfaces of run tag `tag` (a crashed run's too).
    pub fn clean(tag: char) {
        let mine = format!("{PREFIX}{tag}");
        if let Ok(list) = sh("ip", &["-o", "link", "show"]) {
            for line in list.lines() {
                // "7: slfp0h@if6: <...>"
                let name = line.split(':').nth(1).unwrap_or("").trim();
                let name = name.split('@').next().unwrap_or("");
                if name.starts_with(&mine) {
                    let _ = sh("ip", &["link", "del", name]);
                }
            }
        }
        if let Ok(list) = sh("ip", &["netns", "list"]) {
            for line in list.lines() {
                let name = line.split_whitespace().next().unwrap_or("");
                if name.starts_with(&mine) {
                    let _ = sh("ip", &["netns", "del", name]);
                }
            }
        }
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        Links::clean(self.tag);
    }
}

impl Link {
    /// Runs a command inside the worker's namespace.
    pub fn ns_exec(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["netns", "exec", self.netns.as_str()];
        all.extend_from_slice(args);
        sh("ip", &all)
    }

    fn rule(&self, op: &str, chain: &str, extra: &[&str]) -> Result<()> {
        let peer = match chain {
            "INPUT" => "-s",
            _ => "-d",
        };
        let mut a = vec!["iptables", "-w", op, chain, peer, self.host_addr.as_str()];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["-j", "DROP"]);
        self.ns_exec(&a).map(|_| ())
    }

    /// Drops the server's packets to the worker (`replies`), and the worker's to the server
    /// (`requests`).
    pub fn drop_packets(&self, replies: bool, requests: bool) -> Result<()> {
        if replies {
            self.rule("-I", "INPUT", &[])?;
        }
        if requests {
            self.rule("-I", "OUTPUT", &[])?;
        }
        Ok(())
    }

    /// Undoes [`Link::drop_packets`].
    pub fn pass_packets(&self, replies: bool, requests: bool) -> Result<()> {
        if replies {
            self.rule("-D", "INPUT", &[])?;
        }
        if requests {
            self.rule("-D", "OUTPUT", &[])?;
        }
        Ok(())
    }

    /// A slow, lossy link: `loss` of the packets dropped each way (TCP retransmits them,
    /// hundreds of ms later), with `tc netem` delay and jitter when `netem`.
    pub fn slow(&self, loss: f64, netem: bool) -> Result<()> {
        let p = format!("{loss:.3}");
        for chain in ["INPUT", "OUTPUT"] {
            self.rule(
                "-I",
                chain,
                &["-m", "statistic", "--mode", "random", "--probability", &p],
            )?;
        }
        if netem {
            self.ns_exec(&[
                "tc",
                "qdisc",
                "add",
                "dev",
                &self.ns_if,
                "root",
                "netem",
                "delay",
                "200ms",
                "100ms",
            ])?;
        }
        Ok(())
    }

    /// Undoes [`Link::slow`].
    pub fn fast(&self, loss: f64, netem: bool) -> Result<()> {
        let p = format!("{loss:.3}");
        for chain in ["INPUT", "OUTPUT"] {
            self.rule(
                "-D",
                chain,
                &["-m", "statistic", "--mode", "random", "--probability", &p],
            )?;
        }
        if netem {
            self.ns_exec(&["tc", "qdisc", "del", "dev", &self.ns_if, "root"])?;
        }
        Ok(())
    }

    /// Resets every TCP connection between the worker and the server, on both ends (`ss -K`).
    pub fn reset(&self) -> Result<()> {
        self.ns_exec(&["ss", "-K", "dst", &self.host_addr])?;
        sh("ss", &["-K", "dst", &self.ns_addr])?;
        Ok(())
    }

    /// Drops the server's packets on one connection (the worker's end at `port`; the server
    /// at `pg_port`), or lets them through again (`on` false).
    pub fn drop_replies_on(&self, pg_port: u16, port: i32, on: bool) -> Result<()> {
        let (sport, dport) = (pg_port.to_string(), port.to_string());
        self.rule(
            if on { "-I" } else { "-D" },
            "INPUT",
            &["-p", "tcp", "--sport", &sport, "--dport", &dport],
        )
    }

    /// Resets one connection (the worker's end at `port`), on both ends.
    pub fn reset_one(&self, port: i32) -> Result<()> {
        let p = format!(":{port}");
        self.ns_exec(&["ss", "-K", "dst", &self.host_addr, "sport", "=", &p])?;
        sh("ss", &["-K", "dst", &self.ns_addr, "dport", "=", &p])?;
        Ok(())
    }

    /// Removes every rule a fault may have left (after a failed run step).
    pub fn heal(&self) {
        let _ = self.ns_exec(&["iptables", "-w", "-F"]);
        let _ = self.ns_exec(&["tc", "qdisc", "del", "dev", &self.ns_if, "root"]);
    }
}
