//! `skiplock web`: the operator console (see [`crate::web`] and docs/console.md).

use std::io::Write as _;
use std::sync::Arc;

use clap::Args;

use crate::config;
use crate::web::{self, AppState, auth};

/// `skiplock web [--listen ADDR]`.
#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address to listen on. Anything but loopback needs SKIPLOCK_WEB_TOKEN.
    #[arg(long, env = "SKIPLOCK_WEB_LISTEN", default_value = web::DEFAULT_LISTEN)]
    pub listen: String,
}

/// The token setting: unset or empty is `None`; a weak or unprintable one is an error that
/// never quotes it.
pub fn token_setting() -> anyhow::Result<Option<String>> {
    match std::env::var(auth::TOKEN_SETTING) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(crate::Error::config(auth::TOKEN_SETTING, "is not valid UTF-8").into())
        }
        Ok(t) if t.is_empty() => Ok(None),
        Ok(t) => {
            auth::check_token(&t).map_err(|m| crate::Error::config(auth::TOKEN_SETTING, m))?;
            Ok(Some(t))
        }
    }
}

/// Runs the console until SIGINT/SIGTERM.
pub async fn run(url: Option<&str>, a: WebArgs) -> anyhow::Result<()> {
    let token = token_setting()?;
    let statement_timeout = config::env_duration(
        "SKIPLOCK_WEB_STATEMENT_TIMEOUT",
        web::DEFAULT_STATEMENT_TIMEOUT,
    )?;
    let connections = config::env_usize("SKIPLOCK_WEB_CONNECTIONS", web::DEFAULT_CONNECTIONS)?;
    // The address first: a refused --listen must not wait on the database.
    let addr = web::resolve_listen(&a.listen, token.is_some()).await?;
    let db_url = config::database_url(url)?;
    let pool = crate::db::console::connect(&db_url, connections as u32, statement_timeout).await?;
    crate::store::schema::ensure_ready(&pool).await?;
    let db_user = crate::store::web::session_user(&pool).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    println!("skiplock console on http://{bound}/ (database login {db_user})");
    if token.is_some() {
        println!("every request needs SKIPLOCK_WEB_TOKEN (log in at http://{bound}/login)");
    }
    let _ = std::io::stdout().flush();
    tracing::info!(%bound, %db_user, token = token.is_some(), "console listening");
    let state = AppState {
        pool,
        auth: Arc::new(auth::Auth::new(token.as_deref())),
        db_user: db_user.into(),
    };
    web::serve(listener, state, crate::worker::shutdown::signal()).await?;
    Ok(())
}
