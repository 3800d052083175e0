//! `plughost plugins marketplace …`: the marketplaces of the dialect that
//! has them ([`crate::dialects::abilities::Marketplaces`]).

use std::path::Path;

use super::args::MarketplaceCmd;
use super::exit::{Exit, Failure};

pub(super) fn run(home: &Path, command: &MarketplaceCmd) -> Result<Exit, Failure> {
    let m = crate::dialects::abilities::marketplaces()
        .ok_or_else(|| Failure::failed("this build has no dialect with marketplaces"))?;
    let said = match command {
        MarketplaceCmd::Add { source } => m.add(home, source),
        MarketplaceCmd::List { json } => m.list(home, *json),
        MarketplaceCmd::Update { name } => m.update(home, name.as_deref()),
        MarketplaceCmd::Remove { name } => m.remove(home, name),
    }
    .map_err(Failure::failed)?;
    if !said.is_empty() {
        println!("{said}");
    }
    Ok(Exit::Success)
}
