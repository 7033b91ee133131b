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
        let served = if std::env::args().any(|a| a == "--resources") {
            match resources::ResourceServer
                .serve(rmcp::transport::stdio())
                .await
            {
                Ok(running) => running.waiting().await.map(drop),
                Err(e) => Ok(eprintln!("test server: {e}")),
            }
        } else {
            match tools::TestServer::default()
                .serve(rmcp::transport::stdio())
                .await
            {
                Ok(running) => running.waiting().await.map(drop),
                Err(e) => Ok(eprintln!("test server: {e}")),
            }
        };
        if let Err(e) = served {
            eprintln!("test server: {e}");
        }
    });
}
