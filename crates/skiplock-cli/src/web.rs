//! `skiplock web`: the operator console (see [`skiplock_console::web`] and docs/console.md).

use std::io::Write as _;
use std::sync::Arc;

use clap::Args;

use skiplock::config;
use skiplock_console::web::{self, AppState, auth};

/// `skiplock web [--listen ADDR]`.
#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address to listen on. Anything but loopback needs SKIPLOCK_WEB_TOKEN.
    #[arg(long, env = "SKIPLOCK_WEB_LISTEN", default_value = web::DEFAULT_LISTEN)]
    pub listen: String,
}

/// The token setting `name`: unset or empty is `None`; a weak or unprintable one is an
/// error that never quotes it.
pub fn token_setting(name: &str) -> anyhow::Result<Option<String>> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(skiplock::Error::config(name, "is not valid UTF-8").into())
        }
        Ok(t) if t.is_empty() => Ok(None),
        Ok(t) => {
            auth::check_token(&t).map_err(|m| skiplock::Error::config(name, m))?;
            Ok(Some(t))
        }
    }
}

/// Runs the console until SIGINT/SIGTERM.
pub async fn run(url: Option<&str>, a: WebArgs) -> anyhow::Result<()> {
    let token = token_setting(auth::TOKEN_SETTING)?;
    let read_token = token_setting(auth::READ_TOKEN_SETTING)?;
    if token.is_some() && token == read_token {
        return Err(skiplock::Error::config(
            auth::READ_TOKEN_SETTING,
            format!("is the same as {}; a read-only token must differ from the token that opens everything", auth::TOKEN_SETTING),
        )
        .into());
    }
    let https = config::env_bool(auth::HTTPS_SETTING, false)?;
    let session_ttl = config::env_duration(auth::SESSION_TTL_SETTING, auth::DEFAULT_SESSION_TTL)?;
    let read_timeout =
        config::env_duration(web::READ_TIMEOUT_SETTING, web::server::DEFAULT_READ_TIMEOUT)?;
    let top_queues = config::env_usize(web::TOP_QUEUES_SETTING, web::DEFAULT_TOP_QUEUES)?;
    // The doctor page judges stale heartbeats, old running jobs and the LISTEN URL as the
    // workers do.
    let doctor = skiplock::doctor::Thresholds {
        rescue_after: config::env_duration("SKIPLOCK_RESCUE_AFTER", config::DEFAULT_RESCUE_AFTER)?,
        reaper_max_age: config::env_duration(
            "SKIPLOCK_REAPER_MAX_AGE",
            skiplock::maintenance::reaper::DEFAULT_MAX_AGE,
        )?,
        listen_url: config::env_opt("SKIPLOCK_LISTEN_URL").filter(|u| !u.trim().is_empty()),
        ..Default::default()
    };
    let extra_hosts = web::hosts::parse_hosts(
        &config::env_opt(web::hosts::WEB_HOSTS_SETTING).unwrap_or_default(),
    )
    .map_err(|m| skiplock::Error::config(web::hosts::WEB_HOSTS_SETTING, m))?;
    let any_token = token.is_some() || read_token.is_some();
    let statement_timeout = config::env_duration(
        "SKIPLOCK_WEB_STATEMENT_TIMEOUT",
        web::DEFAULT_STATEMENT_TIMEOUT,
    )?;
    let connections = config::env_usize("SKIPLOCK_WEB_CONNECTIONS", web::DEFAULT_CONNECTIONS)?;
    // The address first: a refused --listen must not wait on the database.
    let addr = web::resolve_listen(&a.listen, any_token).await?;
    let db_url = config::database_url(url)?;
    let pool = skiplock_console::db::console::connect(
        &db_url,
        connections as u32,
        statement_timeout,
        config::pool_mode()?,
    )
    .await?;
    skiplock::store::schema::ensure_ready(&pool).await?;
    let db_user = skiplock_console::store::web::session_user(&pool).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    println!("skiplock console on http://{bound}/ (database login {db_user})");
    if any_token {
        println!(
            "every request needs SKIPLOCK_WEB_TOKEN or SKIPLOCK_WEB_READ_TOKEN (log in at http://{bound}/login)"
        );
    }
    let _ = std::io::stdout().flush();
    tracing::info!(%bound, %db_user, token = any_token, "console listening");
    let state = AppState {
        pool,
        auth: Arc::new(auth::Auth::new(
            token.as_deref(),
            read_token.as_deref(),
            session_ttl,
            https,
        )),
        db_user: db_user.into(),
        hosts: Arc::new(web::hosts::AllowedHosts::new(
            bound,
            extra_hosts,
            web::hosts::WEB_HOSTS_SETTING,
        )),
        flash: Arc::new(web::flash::Flashes::default()),
        top_queues,
        doctor,
        parts: skiplock_console::metrics::serve::Parts(Arc::new(
            skiplock_workflows::parts::for_metrics(),
        )),
        read_timeout,
    };
    web::serve(
        listener,
        state,
        read_timeout,
        skiplock::worker::shutdown::signal(),
    )
    .await?;
    Ok(())
}
