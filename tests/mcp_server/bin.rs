//! `toolvisor-test-mcp-server`: an MCP server on stdio for toolvisor's end-to-end tests
//! (see tools.rs). `--noise` first writes lines that are not JSON to stdout (a client
//! must skip them). `--resources` serves resources and prompts instead (resources.rs).

mod resources;
mod tools;

use rmcp::ServiceExt;

fn main() {
    if std::env::args().any(|a| a == "--noise") {
        println!("this is not JSON");
        println!("{{\"neither\": is this");
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("test server: {e}");
            std::process::exit(70);
        }
    };
    rt.block_on(async {
        if std::env::args().any(|a| a == "--resources") {
            serve(resources::ResourceServer).await;
        } else {
            serve(tools::TestServer::default()).await;
        }
    });
}

async fn serve<S: rmcp::ServerHandler>(server: S) {
    match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => eprintln!("test server: {e}"),
    }
}
