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
        // Test runners and their plugins: extra options (`-p plugin`, `-c file`),
        // modules to import, a start-up hook, a config that names plugins.
        E("PYTEST_ADDOPTS"), E("PYTEST_PLUGINS"), P("COVERAGE_"), P("TOX_"), E("RAKEOPT"),
        E("MAVEN_ARGS"), E("ANT_ARGS"), E("SCONSFLAGS"), E("MPLBACKEND"), E("MPLCONFIGDIR"),
        E("IPYTHONDIR"), P("JUPYTER_"), E("PYTHONPLATLIBDIR"), E("PYTHONPYCACHEPREFIX"),
        E("NODE_REPL_EXTERNAL_MODULE"), E("DENO_DIR"), E("RIPGREP_CONFIG_PATH"),
        E("BAT_CONFIG_PATH"), E("AWKPATH"), E("AWKLIBPATH"), E("shell_escape"),
        E("PSQLRC"), E("HGRCPATH"), E("HGEDITOR"), E("KUBECTL_EXTERNAL_DIFF"),
        E("HELM_PLUGINS"), E("TF_CLI_CONFIG_FILE"), E("TERRAFORM_CONFIG"),
        E("AWS_SHARED_CREDENTIALS_FILE"), P("PKG_CONFIG"), E("M4"), E("AUTOCONF"),
        E("AUTOHEADER"), E("AUTOMAKE"), E("ACLOCAL"), E("AUTOM4TE"), E("LIBTOOLIZE"),
        E("OCAMLPARAM"), P("JULIA_"), P("R_ENVIRON"), P("R_LIBS"), P("ERL_"),
        E("GUILE_LOAD_PATH"), E("GUILE_LOAD_COMPILED_PATH"), E("DOTNET_STARTUP_HOOKS"),
        E("DOTNET_ROOT"), E("DOTNET_ADDITIONAL_DEPS"), E("DOTNET_SHARED_STORE"),
        P("CORECLR_"), S("_EXECUTABLE_PATH"), E("PLAYWRIGHT_BROWSERS_PATH"),
        // Where a package or build tool fetches or caches the code it runs.
        E("GOPROXY"), E("GOSUMDB"), E("GONOSUMDB"), E("GONOSUMCHECK"), E("GOINSECURE"),
        E("GOPATH"), E("GOCACHE"), E("GOMODCACHE"), P("UV_"), P("POETRY_"), P("PIPENV_"),
        P("COREPACK_"), E("M2_HOME"), E("MAVEN_HOME"), P("NIX_"), E("VIRTUAL_ENV"),
        E("CONDA_PREFIX"), E("CONDARC"),
        // Version managers: which interpreter or tool runs, and hooks they source.
        P("PYENV_"), P("RBENV_"), P("NODENV_"), P("GOENV_"), P("JENV_"), P("PLENV_"),
        P("PHPENV_"), P("ASDF_"), P("MISE_"), P("RTX_"), P("VOLTA_"), P("FNM_"),
        P("SDKMAN_"), P("RYE_"), E("NVM_DIR"), E("NVM_BIN"),
    ]
};

/// Prefixes a program matches whatever their case: npm (and pnpm) read
/// `NPM_CONFIG_SCRIPT_SHELL`, `npm_config_script_shell` and `Npm_Config_Script_Shell`
/// alike.
const ANY_CASE_PREFIXES: &[&str] = &["npm_config_"];

/// Does setting `key` change what runs? (`PATH[0]` sets `PATH`; `BASH_CMDS[ls]`
/// sets where bash finds `ls`.)
pub fn is_env_hazard(key: &str) -> bool {
    let key = key.split('[').next().unwrap_or(key);
    let any_case = ANY_CASE_PREFIXES.iter().any(|p| {
        key.get(..p.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(p))
    });
    any_case
        || ENV_KEYS.iter().any(|k| match k {
            EnvKey::Exact(e) => key == *e,
            EnvKey::Prefix(p) => key.starts_with(p),
            EnvKey::Suffix(s) => key.ends_with(s),
        })
}
