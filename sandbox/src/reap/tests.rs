use super::*;

#[test]
fn parse_options_and_command() {
    let a = parse(
        [
            "--ppid",
            "7",
            "--instance",
            "abc",
            "--grace-ms",
            "50",
            "--confine",
            "--write",
            "/tmp",
            "--",
            "sh",
            "-c",
            "echo hi",
        ]
        .map(String::from)
        .to_vec(),
    )
    .unwrap();
    assert_eq!(a.ppid, Some(7));
    assert_eq!(a.instance.as_deref(), Some("abc"));
    assert_eq!(a.grace, Duration::from_millis(50));
    assert!(a.confine);
    assert_eq!(a.write, vec![PathBuf::from("/tmp")]);
    assert_eq!(a.argv, ["sh", "-c", "echo hi"]);
    assert!(parse(vec!["--".into()]).is_err());
    assert!(parse(vec!["--bogus".into(), "--".into(), "x".into()]).is_err());
    assert_eq!(main(vec![]), EX_USAGE);
}

#[test]
fn arguments_round_trip() {
    let a = ShimArgs {
        ppid: Some(9),
        instance: Some("i-1".into()),
        grace: Duration::from_millis(2000),
        confine: true,
        write: vec!["/w".into()],
        sandbox: Some(SandboxSpec {
            roots: vec!["/w".into()],
            hidden: vec!["/w/.toolvisor".into()],
            cwd: "/w".into(),
            ..SandboxSpec::default()
        }),
        rlimits: Rlimits {
            fsize: Some(1 << 20),
            ..Rlimits::default()
        },
        report_fd: Some(5),
        control_fd: Some(11),
        tty: Some((24, 80)),
        spare: false,
        holder: false,
        keep_fds: vec![3],
        argv: vec!["sh".into(), "-c".into(), "true".into()],
    };
    assert_eq!(parse(a.to_args().unwrap()).unwrap(), a);
    assert!(parse(["--keep-fd", "2", "--", "sh"].map(String::from).to_vec()).is_err());
    let spare = ShimArgs {
        spare: true,
        tty: None,
        keep_fds: vec![],
        argv: vec![],
        ..a
    };
    assert_eq!(parse(spare.to_args().unwrap()).unwrap(), spare);
    let holder = ShimArgs {
        spare: false,
        holder: true,
        sandbox: None,
        ..spare.clone()
    };
    assert_eq!(parse(holder.to_args().unwrap()).unwrap(), holder);
    assert!(parse(["--holder", "--", "sh"].map(String::from).to_vec()).is_err());
    assert!(parse(["--spare", "--", "sh"].map(String::from).to_vec()).is_err());
    assert!(parse(["--"].map(String::from).to_vec()).is_err());
}
