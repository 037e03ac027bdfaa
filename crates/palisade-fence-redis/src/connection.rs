//! The application's own Redis connection, which the fence sends through:
//! one server or a Redis Cluster.

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// The connection a [`RedisFence`](crate::RedisFence) sends through: the
/// one the application already uses for its data, so its TLS, password,
/// timeouts and reconnection are the application's.
///
/// All three are multiplexed and cheap to clone; every call of a fence
/// goes through the same socket (per node), as the application's own
/// commands do.
#[derive(Clone)]
#[non_exhaustive]
pub enum FenceConnection {
    /// One server, through a self-reconnecting `ConnectionManager`.
    Manager(ConnectionManager),
    /// One server, through a plain multiplexed connection.
    Multiplexed(MultiplexedConnection),
    /// A Redis Cluster: calls are routed by the lock's slot, and the
    /// library is loaded on every primary.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for FenceConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FenceConnection::Manager(_) => "FenceConnection::Manager",
            FenceConnection::Multiplexed(_) => "FenceConnection::Multiplexed",
            FenceConnection::Cluster(_) => "FenceConnection::Cluster",
        })
    }
}

impl From<ConnectionManager> for FenceConnection {
    fn from(connection: ConnectionManager) -> Self {
        FenceConnection::Manager(connection)
    }
}

impl From<MultiplexedConnection> for FenceConnection {
    fn from(connection: MultiplexedConnection) -> Self {
        FenceConnection::Multiplexed(connection)
    }
}

impl From<ClusterConnection> for FenceConnection {
    fn from(connection: ClusterConnection) -> Self {
        FenceConnection::Cluster(connection)
    }
}

/// The name a single server goes by in messages.
pub(crate) const SINGLE_NODE: &str = "server";

impl FenceConnection {
    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self, FenceConnection::Cluster(_))
    }

    /// Sends `command`, routed by its keys on a cluster.
    pub(crate) async fn query(&self, command: &Cmd) -> RedisResult<Value> {
        command.query_async(&mut self.clone()).await
    }

    /// Sends `command` to the primary serving `slot` (the one server when
    /// not a cluster): the client cannot find the keys of a module
    /// command such as `PALISADE.FENCE` by itself.
    pub(crate) async fn query_in_slot(&self, slot: u16, command: &Cmd) -> RedisResult<Value> {
        if self.is_cluster() {
            return self.on_slot(slot, command).await?.extract_error();
        }
        self.query(command).await
    }

    /// Sends `pipeline` as one batch on one connection, on a cluster to the
    /// primary serving `slot`, so a `WAIT` after a fenced call counts the
    /// replicas of the node that ran it.
    pub(crate) async fn pipeline_in_slot(
        &self,
        slot: u16,
        pipeline: &Pipeline,
    ) -> RedisResult<Vec<Value>> {
        let FenceConnection::Cluster(connection) = self else {
            return pipeline.query_async(&mut self.clone()).await;
        };
        let node = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
        connection
            .clone()
            .route_pipeline(pipeline.clone(), 0, pipeline.len(), node)
            .await?
            .into_iter()
            .map(Value::extract_error)
            .collect()
    }

    /// Runs `command` on every primary (the one server, or each cluster
    /// primary); each node's answer, by node.
    pub(crate) async fn on_every_primary(
        &self,
        command: &Cmd,
    ) -> RedisResult<Vec<(String, RedisResult<Value>)>> {
        let FenceConnection::Cluster(connection) = self else {
            return Ok(vec![(SINGLE_NODE.to_owned(), self.query(command).await)]);
        };
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let answer = connection
            .clone()
            .route_command(command.clone(), routing)
            .await?;
        let Value::Map(pairs) = answer else {
            return Ok(vec![("cluster".to_owned(), Ok(answer))]);
        };
        Ok(pairs
            .into_iter()
            .map(|(node, value)| {
                let node = match node {
                    Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    other => format!("{other:?}"),
                };
                let value = match value {
                    Value::ServerError(error) => Err(error.into()),
                    value => Ok(value),
                };
                (node, value)
            })
            .collect())
    }

    /// Runs `command` on `node` (a name from [`Self::on_every_primary`]).
    pub(crate) async fn on_node(&self, node: &str, command: &Cmd) -> RedisResult<Value> {
        let (host, port) = node.rsplit_once(':').unwrap_or((node, ""));
        let node = SingleNodeRoutingInfo::ByAddress {
            host: host.to_owned(),
            port: port.parse().unwrap_or(6379),
        };
        self.on_one_node(node, command).await
    }

    /// Runs `command` on the primary serving `slot`.
    pub(crate) async fn on_slot(&self, slot: u16, command: &Cmd) -> RedisResult<Value> {
        let node = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
        self.on_one_node(node, command).await
    }

    /// Runs `command` on the cluster node `node` names; on a single server,
    /// on that server.
    async fn on_one_node(&self, node: SingleNodeRoutingInfo, command: &Cmd) -> RedisResult<Value> {
        let FenceConnection::Cluster(connection) = self else {
            return self.query(command).await;
        };
        connection
            .clone()
            .route_command(command.clone(), RoutingInfo::SingleNode(node))
            .await
    }
}

/// A fence connection is a Redis connection like the one it wraps, so the
/// fence's commands and pipelines go through one dispatch.
impl ConnectionLike for FenceConnection {
    fn req_packed_command<'a>(&'a mut self, command: &'a Cmd) -> RedisFuture<'a, Value> {
        self.wrapped().req_packed_command(command)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.wrapped().req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        match self {
            FenceConnection::Manager(connection) => connection.get_db(),
            FenceConnection::Multiplexed(connection) => connection.get_db(),
            FenceConnection::Cluster(connection) => connection.get_db(),
        }
    }
}

impl FenceConnection {
    /// The connection this one wraps.
    fn wrapped(&mut self) -> &mut dyn ConnectionLike {
        match self {
            FenceConnection::Manager(connection) => connection,
            FenceConnection::Multiplexed(connection) => connection,
            FenceConnection::Cluster(connection) => connection,
        }
    }
}
