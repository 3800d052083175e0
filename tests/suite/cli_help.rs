//! Every option and subcommand of `plughost` says what it is in `--help`
//! (issue 51: several had an empty line).
use clap::CommandFactory;

fn undescribed(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        if arg.is_hide_set() || ["help", "version"].contains(&arg.get_id().as_str()) {
            continue;
        }
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            out.push(format!("{path} {}", arg.get_id()));
        }
    }
    for sub in cmd.get_subcommands() {
        let here = format!("{path} {}", sub.get_name());
        if sub.get_about().is_none() && sub.get_long_about().is_none() && sub.get_name() != "help" {
            out.push(here.clone());
        }
        undescribed(sub, &here, out);
    }
}

#[test]
fn every_option_and_command_has_a_description() {
    let mut missing = Vec::new();
    undescribed(&plughost::cli::Cli::command(), "plughost", &mut missing);
    assert!(missing.is_empty(), "without a description: {missing:#?}");
}
