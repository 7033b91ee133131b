//! The environment variables that change what runs: a program's path, a library,
//! start-up code, a config home. Setting one (an assignment prefix, `env X=1`, a bare
//! assignment, a `for` variable) asks, whatever the command.

/// A variable that names a program, a library, start-up code or a config home.
pub enum EnvKey {
    /// This name.
    Exact(&'static str),
    /// Any name starting so (`LD_`).
    Prefix(&'static str),
    /// Any name ending so (`_EDITOR`).
    Suffix(&'static str),
}

/// The environment hazards: a call `env`, an assignment prefix (`X=1 cmd`), `env X=1`
/// or a bare assignment setting one of these is high risk and asks.
#[rustfmt::skip]
pub static ENV_KEYS: &[EnvKey] = {
    use EnvKey::{Exact as E, Prefix as P, Suffix as S};
    &[
        E("PATH"), P("LD_"), P("DYLD_"), P("BASH_"), E("ENV"), E("EXECIGNORE"), E("SHELLOPTS"),
        E("BASHOPTS"), E("IFS"), E("PS4"), E("PROMPT_COMMAND"), E("POSIXLY_CORRECT"),
        E("TEXTDOMAIN"), E("TEXTDOMAINDIR"), E("CDPATH"), E("SHELL"), E("CONFIG_SHELL"),
        P("GIT_"), S("_COMMAND"), S("_EDITOR"), S("PAGER"), S("_ASKPASS"), S("_WRAPPER"),
        S("_OPTIONS"), S("_OPTS"), E("EDITOR"), E("VISUAL"), E("LESSOPEN"), E("LESSCLOSE"),
        E("MANOPT"), E("BROWSER"), E("HOME"), P("XDG_CONFIG_"), P("XDG_DATA_"), E("RUSTC"),
        P("RUSTC_"), E("RUSTFLAGS"), E("RUSTDOC"), E("RUSTDOCFLAGS"), P("RUSTUP_"),
        P("CARGO_"), E("NODE_OPTIONS"), E("NODE_PATH"), E("PYTHONPATH"), E("PYTHONSTARTUP"),
        E("PYTHONHOME"), E("PYTHONUSERBASE"), E("PYTHONEXECUTABLE"), E("PYTHONBREAKPOINT"),
        E("PYTHONWARNINGS"), E("PERL5OPT"), E("PERL5LIB"), E("PERLLIB"), E("PERL5DB"),
        E("RUBYOPT"), E("RUBYLIB"), P("LUA_"), E("PHPRC"), E("PHP_INI_SCAN_DIR"),
        E("TCLLIBPATH"), P("R_PROFILE"), P("npm_config_"), P("NPM_CONFIG_"), E("GEM_HOME"),
        E("GEM_PATH"), E("CC"), E("CXX"), E("CPP"), E("LD"), E("AR"), E("AS"), E("NM"),
        E("RANLIB"), E("STRIP"), E("OBJCOPY"), E("FC"), E("CFLAGS"), E("CXXFLAGS"),
        E("CPPFLAGS"), E("LDFLAGS"), E("MAKE"), E("MAKEFLAGS"), E("MAKEFILES"),
        E("GNUMAKEFLAGS"), E("MFLAGS"), E("GCONV_PATH"), E("GLIBC_TUNABLES"), E("LOCPATH"),
        E("OPENSSL_CONF"), E("OPENSSL_ENGINES"), E("KUBECONFIG"), E("DOCKER_CONFIG"),
        E("AWS_CONFIG_FILE"), E("CURL_HOME"), E("WGETRC"), E("JAVA_HOME"), E("CLASSPATH"),
        // Options read from the environment that equal an option that runs code
        // (`LESS=+!cmd` is `less +!cmd`, `ZIPOPT=-TT…` is `zip -TT…`), and start-up
        // files or helpers named by a variable.
        E("LESS"), E("LESSKEY"), E("LESSKEYIN"), E("ZIPOPT"), E("UNZIP"), E("UNZIPOPT"),
        E("ZIPINFO"), E("ZIPINFOOPT"), E("VIMINIT"), E("GVIMINIT"), E("EXINIT"),
        E("MYVIMRC"), E("MYGVIMRC"), E("VIMRUNTIME"), E("VIM"), E("EMACSLOADPATH"),
        E("RSYNC_RSH"), E("RSYNC_CONNECT_PROG"), E("RSH"), E("CVS_RSH"), E("SVN_SSH"),
        E("FCEDIT"), E("ZDOTDIR"), E("INPUTRC"), E("MANROFFOPT"), E("MANPATH"),
        E("GCC_EXEC_PREFIX"), E("COMPILER_PATH"), P("CCACHE_"), P("DISTCC_"),
        P("SCCACHE_"), P("CMAKE_"), P("CGO_"), E("GOFLAGS"), E("GOENV"), E("GOROOT"),
        E("GOTOOLCHAIN"), P("BUNDLE_"), P("YARN_"), P("PIP_"), E("GRADLE_USER_HOME"),
        E("XZ_OPT"), E("XZ_DEFAULTS"), E("GZIP"), E("BZIP2"), E("BZIP"),
    ]
};

/// Does setting `key` change what runs? (`PATH[0]` sets `PATH`; `BASH_CMDS[ls]`
/// sets where bash finds `ls`.)
pub fn is_env_hazard(key: &str) -> bool {
    let key = key.split('[').next().unwrap_or(key);
    ENV_KEYS.iter().any(|k| match k {
        EnvKey::Exact(e) => key == *e,
        EnvKey::Prefix(p) => key.starts_with(p),
        EnvKey::Suffix(s) => key.ends_with(s),
    })
}
