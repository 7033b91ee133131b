fn main() {
    toolvisor_supervisor::cli::main()
}
