//! The agent's [`AgentLink`]: what plugins reach of the agent running their
//! host (its model; the host's tool pipeline), handed to the host when the
//! agent is made, so the plugin layers never depend on the agent.

use std::sync::{Arc, Weak};

use serde_json::Value;

use crate::agent::provider::{ChatRequest, Provider};
use crate::core::agent_link::{AgentLink, LinkCompletion, LinkRequest};
use crate::core::hooks::BoxFuture;
use crate::core::outcome::ToolResult;
use crate::host::Host;

struct Link {
    /// Held weakly: the host holds the link (dropping the host unbinds).
    host: Weak<Host>,
    provider: Arc<dyn Provider>,
}

/// Make `provider`'s model and `host`'s tools what `host`'s plugins reach.
pub fn bind(host: &Arc<Host>, provider: Arc<dyn Provider>) {
    host.set_agent(Arc::new(Link {
        host: Arc::downgrade(host),
        provider,
    }));
}

impl AgentLink for Link {
    fn model(&self) -> String {
        self.provider.model()
    }

    fn complete(&self, request: LinkRequest) -> BoxFuture<Result<LinkCompletion, String>> {
        let provider = Arc::clone(&self.provider);
        Box::pin(async move {
            let model = provider.model();
            let request = ChatRequest {
                model: model.clone(),
                system: String::new(),
                messages: Arc::new(request.messages),
                tools: Default::default(),
                session_key: request.session_key,
                params: request.params,
            };
            let response = provider
                .complete(request, None)
                .await
                .map_err(|e| e.to_string())?;
            Ok(LinkCompletion {
                text: response.text,
                model,
                usage: response.usage,
            })
        })
    }

    fn dispatch_tool(
        &self,
        name: String,
        args: Value,
        task_id: String,
    ) -> BoxFuture<Option<ToolResult>> {
        let host = self.host.upgrade();
        Box::pin(async move {
            let host = host?;
            Some(
                crate::core::dispatch::call_tool(&host.registry(), &name, args, &task_id, "").await,
            )
        })
    }
}
