//! The deploy files under `deploy/`, checked for what breaks silently.
//!
//! Docker and a Kubernetes cluster are not available where the tests run, so
//! nothing here starts a container. Instead every YAML file is parsed and
//! the parts that rot without anyone noticing are cross-checked against the
//! code and against each other:
//!
//! - every `PALISADE_*` variable a deploy file sets is one the server
//!   binaries accept (their clap `env = "..."` names, read from the source);
//! - health checks and probes ask `/healthz` on the port the server listens on;
//! - the compose file's three etcd members agree on `--initial-cluster`,
//!   Redis keeps an AOF with an fsync per write, and each resource server has
//!   a volume of its own at its data directory;
//! - the Kubernetes manifests reference each other by the right names;
//! - the Dockerfile builds the packages and ships the binaries the other
//!   files run;
//! - docs/operations.md names exactly the metrics the server exports.
//!
//! Fast: it reads files, nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

/// Every environment variable the resource server binaries read, and the
/// source file whose clap definitions declare it. The list is checked
/// against those files in both directions, so it cannot drift from them.
const ACCEPTED_VARIABLES: &[(&str, &str)] = &[
    ("PALISADE_DATA_DIR", SERVER_CONFIG),
    ("PALISADE_STORE", SERVER_CONFIG),
    ("PALISADE_LISTEN", SERVER_CONFIG),
    ("PALISADE_DURABILITY", SERVER_CONFIG),
    ("PALISADE_BUFFERED_FLUSH_MS", SERVER_CONFIG),
    ("PALISADE_MAX_KEY_BYTES", SERVER_CONFIG),
    ("PALISADE_MAX_VALUE_BYTES", SERVER_CONFIG),
    ("PALISADE_MAX_BATCH_OPS", SERVER_CONFIG),
    ("PALISADE_MAX_BODY_BYTES", SERVER_CONFIG),
    ("PALISADE_IDEMPOTENCY_WINDOW", SERVER_CONFIG),
    ("PALISADE_CACHE_CAPACITY_BYTES", SERVER_CONFIG),
    ("PALISADE_STORE_CONNECTIONS", SERVER_CONFIG),
    ("PALISADE_STORE_STATEMENT_TIMEOUT", SERVER_CONFIG),
    ("PALISADE_LIVE_CHECK", CLI_SERVE),
    ("PALISADE_ETCD_ENDPOINTS", CLI_SERVE),
    ("PALISADE_REDIS_URL", CLI_SERVE),
    ("PALISADE_DATABASE_URL", CLI_SERVE),
    ("PALISADE_ZOOKEEPER", CLI_SERVE),
    ("PALISADE_BODY_READ_TIMEOUT_MS", SERVER_CONFIG),
    ("PALISADE_REQUEST_TIMEOUT", SERVER_CONFIG),
    ("PALISADE_HEADER_READ_TIMEOUT_MS", SERVER_CONFIG),
    ("PALISADE_ISSUERS", SERVER_CONFIG),
    ("PALISADE_MAX_CONNECTIONS", SERVER_CONFIG),
    ("PALISADE_MAX_HEADERS", SERVER_CONFIG),
    ("PALISADE_MAX_HEADER_BYTES", SERVER_CONFIG),
    ("PALISADE_WORKER_THREADS", SERVER_CONFIG),
    ("PALISADE_MAX_IN_FLIGHT", SERVER_CONFIG),
    ("PALISADE_MAX_MARK_RAISE", SERVER_CONFIG),
    ("PALISADE_MAX_MARK_RAISE_TIME", SERVER_CONFIG),
    ("PALISADE_REQUIRE_SIGNATURES", SERVER_CONFIG),
    ("PALISADE_TLS_CERT", SERVER_CONFIG),
    ("PALISADE_TLS_KEY", SERVER_CONFIG),
    ("PALISADE_TOKENS_FILE", SERVER_CONFIG),
    ("PALISADE_VERIFY_KEYS_FILE", SERVER_CONFIG),
    ("PALISADE_LIVE_CHECK_ISSUER", CLI_SERVE),
    ("PALISADE_LOCK_PREFIX", CLI_SERVE),
    ("PALISADE_REDIS_CA_CERT", CLI_SERVE),
];

/// The `palisade-server` flags (flattened into `palisade serve` too).
const SERVER_CONFIG: &str = "crates/palisade-server/src/config.rs";
/// The flags `palisade serve` adds: the live check.
const CLI_SERVE: &str = "crates/palisade-cli/src/serve.rs";

/// Variables whose value is a number of some kind.
const NUMERIC_VARIABLES: &[&str] = &[
    "PALISADE_BUFFERED_FLUSH_MS",
    "PALISADE_MAX_KEY_BYTES",
    "PALISADE_MAX_VALUE_BYTES",
    "PALISADE_MAX_BATCH_OPS",
    "PALISADE_MAX_BODY_BYTES",
    "PALISADE_IDEMPOTENCY_WINDOW",
    "PALISADE_CACHE_CAPACITY_BYTES",
    "PALISADE_STORE_CONNECTIONS",
];

/// `--durability` values, and the `DurabilityMode` variants they come from.
const DURABILITY_VALUES: &[(&str, &str)] = &[("flushed", "Flushed"), ("buffered", "Buffered")];
/// `--live-check` values, and the `LiveCheckKind` variants they come from.
const LIVE_CHECK_VALUES: &[(&str, &str)] =
    &[("none", "None"), ("etcd", "Etcd"), ("redis", "Redis")];

#[test]
fn every_yaml_file_under_deploy_parses() {
    let files = yaml_files();
    let names: BTreeSet<String> = files.iter().map(|file| relative(file)).collect();
    for expected in [
        "deploy/compose.yaml",
        "deploy/k8s/configmap.yaml",
        "deploy/k8s/statefulset.yaml",
        "deploy/k8s/service.yaml",
        "deploy/k8s/service-headless.yaml",
    ] {
        assert!(
            names.contains(expected),
            "{expected} is missing (found {names:?})"
        );
    }
    for file in &files {
        let documents = load_yaml(file);
        assert!(
            !documents.is_empty(),
            "{}: no YAML document",
            relative(file)
        );
        for (index, document) in documents.iter().enumerate() {
            assert!(
                document.as_hash().is_some(),
                "{} document {index}: expected a mapping, found {document:?}",
                relative(file)
            );
        }
    }
}

#[test]
fn the_accepted_variables_match_the_flag_definitions() {
    let mut declared_by_file: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for source in [SERVER_CONFIG, CLI_SERVE] {
        declared_by_file.insert(source, clap_env_names(&read(source)));
    }
    for (variable, source) in ACCEPTED_VARIABLES {
        assert!(
            declared_by_file[source].contains(*variable),
            "{variable} is in this test's list but {source} declares no `env = \"{variable}\"`"
        );
    }
    let listed: BTreeSet<&str> = ACCEPTED_VARIABLES.iter().map(|(name, _)| *name).collect();
    for (source, declared) in &declared_by_file {
        for variable in declared {
            assert!(
                listed.contains(variable.as_str()),
                "{source} declares `env = \"{variable}\"`, missing from ACCEPTED_VARIABLES here: \
                 add it (and to docs/operations.md and the deploy files if they should set it)"
            );
        }
    }
    // The values the deploy files use must still be variants of the enums.
    let server_config = read(SERVER_CONFIG);
    for (_, variant) in DURABILITY_VALUES {
        assert!(
            server_config.contains(&format!("    {variant},")),
            "DurabilityMode::{variant} is gone from {SERVER_CONFIG}"
        );
    }
    let cli_serve = read(CLI_SERVE);
    for (_, variant) in LIVE_CHECK_VALUES {
        assert!(
            cli_serve.contains(&format!("    {variant},")),
            "LiveCheckKind::{variant} is gone from {CLI_SERVE}"
        );
    }
}

#[test]
fn every_palisade_variable_in_deploy_is_accepted() {
    let accepted: BTreeSet<&str> = ACCEPTED_VARIABLES.iter().map(|(name, _)| *name).collect();

    // Any mention at all, in any file but prose: comments count too, since
    // a commented-out setting is an instruction someone will follow.
    let mut mentions = 0;
    for file in deploy_files() {
        if file.extension().is_some_and(|extension| extension == "md") {
            continue;
        }
        for variable in palisade_tokens(&read_path(&file)) {
            mentions += 1;
            assert!(
                accepted.contains(variable.as_str()),
                "{}: {variable} is not a variable the server reads",
                relative(&file)
            );
        }
    }
    assert!(
        mentions >= 20,
        "only {mentions} PALISADE_* mentions under deploy/: did a file move?"
    );

    // Every value actually set, wherever it is set, must make sense.
    let settings = all_settings();
    let places: BTreeSet<&str> = settings
        .iter()
        .map(|setting| setting.place.as_str())
        .collect();
    for expected in [
        "compose palisade-a",
        "compose palisade-b",
        "k8s ConfigMap palisade-server",
    ] {
        assert!(
            places.contains(expected),
            "no PALISADE_* settings found in {expected}: {places:?}"
        );
    }
    assert!(
        places.iter().any(|place| place.starts_with("systemd ")),
        "no systemd settings: {places:?}"
    );
    assert!(
        places.iter().any(|place| place.starts_with("Dockerfile")),
        "no Dockerfile ENV: {places:?}"
    );
    for setting in &settings {
        check_value(setting);
    }
}

#[test]
fn probes_and_health_checks_ask_healthz_on_the_listening_port() {
    // Compose: every resource server's health check.
    let compose = compose();
    let servers = resource_servers(&compose);
    assert!(
        servers.len() >= 2,
        "expected two resource servers, found {servers:?}"
    );
    for name in &servers {
        let service = &compose["services"][name.as_str()];
        let listen = listen_port(&environment(service), &format!("compose {name}"));
        let test = strings(&service["healthcheck"]["test"]).join(" ");
        assert!(
            test.contains(&format!("127.0.0.1:{listen}/healthz")),
            "compose {name}: health check `{test}` does not ask /healthz on port {listen}"
        );
    }

    // Kubernetes: every probe of every container.
    let manifests = k8s_manifests();
    let config = config_map_data(&manifests);
    let listen = listen_port(&config, "k8s ConfigMap");
    let mut probes = 0;
    for (_, container) in containers(&manifests) {
        let name = text(&container["name"]);
        for required in ["readinessProbe", "livenessProbe"] {
            assert!(
                !container[required].is_badvalue(),
                "container {name}: no {required}"
            );
        }
        let ports = container_ports(container);
        for kind in ["startupProbe", "readinessProbe", "livenessProbe"] {
            let probe = &container[kind];
            if probe.is_badvalue() {
                continue;
            }
            probes += 1;
            assert_eq!(
                text(&probe["httpGet"]["path"]),
                "/healthz",
                "container {name}: {kind} path"
            );
            let port = resolve_port(&probe["httpGet"]["port"], &ports)
                .unwrap_or_else(|| panic!("container {name}: {kind} port names no container port"));
            assert_eq!(
                port, listen,
                "container {name}: {kind} port vs PALISADE_LISTEN"
            );
        }
    }
    assert!(probes >= 2, "no probes found");

    // The image's own health check.
    let dockerfile = dockerfile();
    let listen = listen_port(&dockerfile.env, "Dockerfile ENV");
    let healthcheck = dockerfile
        .instructions("HEALTHCHECK")
        .next()
        .expect("the Dockerfile has a HEALTHCHECK");
    assert!(
        healthcheck.contains(&format!("127.0.0.1:{listen}/healthz")),
        "Dockerfile HEALTHCHECK `{healthcheck}` does not ask /healthz on port {listen}"
    );
    let exposed = dockerfile
        .instructions("EXPOSE")
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        exposed
            .split_whitespace()
            .any(|port| port == listen.to_string()),
        "Dockerfile EXPOSE `{exposed}` lacks port {listen}"
    );
}

#[test]
fn compose_has_three_etcd_members_that_agree_on_the_cluster() {
    let compose = compose();
    let members = etcd_members(&compose);
    assert_eq!(
        members.len(),
        3,
        "expected 3 etcd members, found {members:?}"
    );
    let member_names: BTreeSet<&str> = members.iter().map(String::as_str).collect();

    let mut tokens = BTreeSet::new();
    let mut clusters = BTreeSet::new();
    let mut data_volumes = BTreeSet::new();
    for member in &members {
        let service = &compose["services"][member.as_str()];
        let image = text(&service["image"]);
        let tag = image.rsplit(':').next().unwrap_or_default();
        let version: Vec<&str> = tag.trim_start_matches('v').split('.').collect();
        assert!(
            tag.starts_with("v3.5.") && version.len() == 3 && version[2].parse::<u32>().is_ok(),
            "{member}: image `{image}` is not pinned to an etcd 3.5.x release"
        );
        let arguments = command(service);
        let flag = |name: &str| {
            flag_value(&arguments, name).unwrap_or_else(|| panic!("{member}: no {name}"))
        };
        assert_eq!(
            flag("--name"),
            *member,
            "{member}: --name is not the service name"
        );
        assert_eq!(flag("--initial-cluster-state"), "new", "{member}");
        tokens.insert(flag("--initial-cluster-token"));

        let initial_cluster = flag("--initial-cluster");
        let mut peers = BTreeMap::new();
        for entry in initial_cluster.split(',') {
            let (name, url) = entry
                .split_once('=')
                .unwrap_or_else(|| panic!("{member}: bad --initial-cluster entry `{entry}`"));
            assert!(
                peers.insert(name.to_owned(), url.to_owned()).is_none(),
                "{member}: {name} twice"
            );
        }
        let peer_names: BTreeSet<&str> = peers.keys().map(String::as_str).collect();
        assert_eq!(
            peer_names, member_names,
            "{member}: --initial-cluster names vs etcd services"
        );
        for (name, url) in &peers {
            assert_eq!(
                url_host(url),
                name,
                "{member}: peer {name} is reached at `{url}`"
            );
        }
        assert_eq!(
            peers[member.as_str()],
            flag("--initial-advertise-peer-urls"),
            "{member}: --initial-cluster disagrees with its own --initial-advertise-peer-urls"
        );
        assert_eq!(
            url_host(&flag("--advertise-client-urls")),
            *member,
            "{member}"
        );
        clusters.insert(initial_cluster);

        let data_dir = flag("--data-dir");
        let volume = named_volume_at(&compose, service, &data_dir)
            .unwrap_or_else(|| panic!("{member}: no named volume at --data-dir {data_dir}"));
        assert!(
            data_volumes.insert(volume.clone()),
            "{member}: volume {volume} is shared"
        );
        assert!(
            !service["healthcheck"].is_badvalue(),
            "{member}: no health check"
        );
    }
    assert_eq!(
        tokens.len(),
        1,
        "the members disagree on --initial-cluster-token: {tokens:?}"
    );
    assert_eq!(
        clusters.len(),
        1,
        "the members disagree on --initial-cluster: {clusters:?}"
    );
}

#[test]
fn compose_redis_keeps_an_aof_with_an_fsync_per_write() {
    let compose = compose();
    let redis: Vec<String> = service_names(&compose)
        .into_iter()
        .filter(|name| text(&compose["services"][name.as_str()]["image"]).starts_with("redis:"))
        .collect();
    assert_eq!(
        redis.len(),
        1,
        "expected one Redis service, found {redis:?}"
    );
    let service = &compose["services"][redis[0].as_str()];
    let image = text(&service["image"]);
    assert!(
        image.starts_with("redis:7"),
        "Redis image `{image}` is not Redis 7"
    );
    let arguments = command(service);
    assert_eq!(
        flag_value(&arguments, "--appendonly").as_deref(),
        Some("yes"),
        "{arguments:?}"
    );
    assert_eq!(
        flag_value(&arguments, "--appendfsync").as_deref(),
        Some("always"),
        "{arguments:?}"
    );
    let directory = flag_value(&arguments, "--dir").unwrap_or_else(|| "/data".to_owned());
    assert!(
        named_volume_at(&compose, service, &directory).is_some(),
        "Redis keeps its AOF in {directory}, which is not on a named volume"
    );
    assert!(
        !service["healthcheck"].is_badvalue(),
        "Redis has no health check"
    );
}

#[test]
fn compose_resource_servers_each_have_their_own_volume_and_live_check() {
    let compose = compose();
    let servers = resource_servers(&compose);
    assert!(
        servers.len() >= 2,
        "expected two resource servers, found {servers:?}"
    );
    let etcd_members: BTreeSet<String> = etcd_members(&compose).into_iter().collect();

    let mut volumes_in_use: BTreeMap<String, String> = BTreeMap::new();
    let mut live_checks = BTreeSet::new();
    for name in &servers {
        let service = &compose["services"][name.as_str()];
        let environment = environment(service);
        let data_dir = environment
            .get("PALISADE_DATA_DIR")
            .unwrap_or_else(|| panic!("compose {name}: no PALISADE_DATA_DIR"));
        let volume = named_volume_at(&compose, service, data_dir)
            .unwrap_or_else(|| panic!("compose {name}: no named volume at {data_dir}"));
        if let Some(other) = volumes_in_use.insert(volume.clone(), name.clone()) {
            panic!("compose {name} and {other} share the volume {volume}");
        }
        assert!(
            text(&service["stop_grace_period"])
                .trim_end_matches('s')
                .parse::<u64>()
                .is_ok_and(|seconds| seconds >= 30),
            "compose {name}: stop_grace_period must leave time to flush (>= 30s)"
        );

        let live_check = environment
            .get("PALISADE_LIVE_CHECK")
            .cloned()
            .unwrap_or_else(|| "none".into());
        match live_check.as_str() {
            "etcd" => {
                let endpoints = &environment["PALISADE_ETCD_ENDPOINTS"];
                let hosts: BTreeSet<String> = endpoints
                    .split(',')
                    .map(|endpoint| url_host(endpoint).to_owned())
                    .collect();
                assert_eq!(
                    hosts, etcd_members,
                    "compose {name}: etcd endpoints `{endpoints}`"
                );
                for member in &etcd_members {
                    assert_depends_on(service, member, name);
                }
            }
            "redis" => {
                let url = &environment["PALISADE_REDIS_URL"];
                let host = url_host(url);
                assert!(
                    text(&compose["services"][host]["image"]).starts_with("redis:"),
                    "compose {name}: PALISADE_REDIS_URL `{url}` names no Redis service"
                );
                assert_depends_on(service, host, name);
            }
            _ => {}
        }
        live_checks.insert(live_check);
    }
    for expected in ["etcd", "redis"] {
        assert!(
            live_checks.contains(expected),
            "no resource server live-checks with {expected}"
        );
    }
}

#[test]
fn compose_dependencies_wait_for_health() {
    let compose = compose();
    let names: BTreeSet<String> = service_names(&compose).into_iter().collect();
    let mut edges = 0;
    for name in &names {
        let service = &compose["services"][name.as_str()];
        let Some(dependencies) = service["depends_on"].as_hash() else {
            assert!(
                service["depends_on"].is_badvalue(),
                "compose {name}: depends_on must be the long form with a condition"
            );
            continue;
        };
        for (dependency, settings) in dependencies {
            edges += 1;
            let dependency = text(dependency);
            assert!(
                names.contains(dependency),
                "compose {name} depends on unknown {dependency}"
            );
            let condition = text(&settings["condition"]);
            match condition {
                "service_healthy" => {
                    let healthcheck = &compose["services"][dependency]["healthcheck"];
                    assert!(
                        !healthcheck.is_badvalue()
                            && healthcheck["disable"].as_bool() != Some(true),
                        "compose {name} waits for {dependency} to be healthy, which has no health check"
                    );
                }
                "service_completed_successfully" => {}
                other => {
                    panic!("compose {name} -> {dependency}: condition `{other}` waits for nothing")
                }
            }
        }
    }
    assert!(
        edges >= 6,
        "only {edges} dependencies: did the servers stop waiting for etcd and Redis?"
    );

    // The demo is a one-shot job running a demo binary.
    let demo = &compose["services"]["demo"];
    assert!(!demo.is_badvalue(), "no `demo` service");
    assert_eq!(text(&demo["restart"]), "no", "the demo must run once");
    let program = command(demo).first().cloned().unwrap_or_default();
    assert!(
        program.starts_with("example-"),
        "the demo runs `{program}`, not a demo binary"
    );
    // With a lock service, the demo knows where it is and waits for it.
    let demo_environment = environment(demo);
    match flag_value(&command(demo), "--backend").as_deref() {
        None | Some("embedded") => {}
        Some("etcd") => {
            assert!(demo_environment.contains_key("PALISADE_ETCD_ENDPOINTS"));
            for member in etcd_members(&compose) {
                assert_depends_on(demo, &member, "demo");
            }
        }
        Some("redis") => {
            let url = &demo_environment["PALISADE_REDIS_URL"];
            assert_depends_on(demo, url_host(url), "demo");
        }
        Some(other) => panic!("the demo runs with --backend {other}: not embedded|etcd|redis"),
    }
}

#[test]
fn k8s_manifests_fit_together() {
    let manifests = k8s_manifests();
    for (file, manifest) in &manifests {
        assert!(
            manifest["metadata"]["namespace"].is_badvalue(),
            "{file}: sets a namespace; the manifests are meant to go where they are applied"
        );
    }
    let by_kind = |kind: &str| -> Vec<&Yaml> {
        manifests
            .iter()
            .filter(|(_, manifest)| text(&manifest["kind"]) == kind)
            .map(|(_, manifest)| manifest)
            .collect()
    };
    let config = config_map_data(&manifests);
    let data_dir = config
        .get("PALISADE_DATA_DIR")
        .expect("the ConfigMap sets PALISADE_DATA_DIR");
    let config_map_names: BTreeSet<&str> = by_kind("ConfigMap")
        .iter()
        .map(|map| text(&map["metadata"]["name"]))
        .collect();
    let services = by_kind("Service");

    let stateful_sets = by_kind("StatefulSet");
    assert_eq!(stateful_sets.len(), 1, "expected one StatefulSet");
    let set = stateful_sets[0];
    let pod = &set["spec"]["template"];
    let pod_labels = string_map(&pod["metadata"]["labels"]);
    assert!(
        is_subset(
            &string_map(&set["spec"]["selector"]["matchLabels"]),
            &pod_labels
        ),
        "the StatefulSet's selector does not match its pod labels"
    );

    // The governing Service exists and is headless.
    let governing = text(&set["spec"]["serviceName"]);
    let headless = services
        .iter()
        .find(|service| text(&service["metadata"]["name"]) == governing)
        .unwrap_or_else(|| panic!("serviceName {governing} names no Service"));
    assert_eq!(
        text(&headless["spec"]["clusterIP"]),
        "None",
        "{governing} is not headless"
    );

    // Every Service selects the pods and targets a container port; one of
    // them is the ClientIP entry point.
    let (_, container) = containers(&manifests)
        .into_iter()
        .next()
        .expect("a container");
    let ports = container_ports(container);
    let mut client_ip = 0;
    for service in &services {
        let name = text(&service["metadata"]["name"]);
        assert!(
            is_subset(&string_map(&service["spec"]["selector"]), &pod_labels),
            "Service {name} does not select the server's pods"
        );
        for port in service["spec"]["ports"].as_vec().expect("Service ports") {
            assert!(
                resolve_port(&port["targetPort"], &ports).is_some(),
                "Service {name}: targetPort {:?} is no container port",
                port["targetPort"]
            );
        }
        if text(&service["spec"]["sessionAffinity"]) == "ClientIP" {
            client_ip += 1;
        }
    }
    assert_eq!(
        client_ip, 1,
        "expected one Service with sessionAffinity: ClientIP"
    );

    // Configuration from the ConfigMap, data on the claimed volume.
    let env_from = container["envFrom"]
        .as_vec()
        .expect("the container takes envFrom");
    assert!(
        env_from
            .iter()
            .any(|source| config_map_names.contains(text(&source["configMapRef"]["name"]))),
        "envFrom names no ConfigMap of these manifests"
    );
    let claims: BTreeSet<&str> = set["spec"]["volumeClaimTemplates"]
        .as_vec()
        .expect("volumeClaimTemplates")
        .iter()
        .map(|claim| text(&claim["metadata"]["name"]))
        .collect();
    let data_mount = container["volumeMounts"]
        .as_vec()
        .expect("volumeMounts")
        .iter()
        .find(|mount| text(&mount["mountPath"]) == data_dir)
        .unwrap_or_else(|| panic!("nothing is mounted at PALISADE_DATA_DIR {data_dir}"));
    assert!(
        claims.contains(text(&data_mount["name"])),
        "{data_dir} is mounted from {:?}, not from a volumeClaimTemplate ({claims:?})",
        data_mount["name"]
    );

    // Non-root, no privilege escalation, bounded, time to flush on shutdown.
    let pod_spec = &pod["spec"];
    assert_eq!(
        pod_spec["securityContext"]["runAsNonRoot"].as_bool(),
        Some(true),
        "runAsNonRoot"
    );
    assert!(
        pod_spec["securityContext"]["runAsUser"]
            .as_i64()
            .is_some_and(|uid| uid > 0),
        "runAsUser must be a non-root uid"
    );
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"].as_bool(),
        Some(false),
        "allowPrivilegeEscalation"
    );
    assert!(
        pod_spec["terminationGracePeriodSeconds"]
            .as_i64()
            .is_some_and(|seconds| seconds >= 30),
        "terminationGracePeriodSeconds must leave time to flush"
    );
    for section in ["requests", "limits"] {
        assert!(
            !container["resources"][section]["memory"].is_badvalue(),
            "resources.{section}.memory is not set"
        );
    }

    // The kustomization lists every manifest, and only existing ones.
    let kustomization = manifests
        .iter()
        .find(|(_, manifest)| text(&manifest["kind"]) == "Kustomization")
        .map(|(_, manifest)| manifest)
        .expect("deploy/k8s/kustomization.yaml");
    let listed: BTreeSet<String> = strings(&kustomization["resources"]).into_iter().collect();
    let present: BTreeSet<String> = manifests
        .iter()
        .filter(|(_, manifest)| text(&manifest["kind"]) != "Kustomization")
        .map(|(file, _)| file.rsplit('/').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        listed, present,
        "kustomization.yaml resources vs the files in deploy/k8s"
    );
}

#[test]
fn the_dockerfile_builds_every_binary_the_deploy_files_run() {
    let dockerfile = dockerfile();
    let stages = dockerfile.instructions("FROM").collect::<Vec<_>>();
    assert!(
        stages
            .first()
            .is_some_and(|stage| stage.starts_with("rust:1-bookworm")),
        "the builder stage is not rust:1-bookworm: {stages:?}"
    );
    assert!(
        stages
            .last()
            .is_some_and(|stage| stage.starts_with("debian:bookworm-slim")),
        "the runtime stage is not debian:bookworm-slim: {stages:?}"
    );
    let runs = dockerfile
        .instructions("RUN")
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        runs.contains("protobuf-compiler"),
        "the builder does not install protoc"
    );

    let user = dockerfile
        .instructions("USER")
        .last()
        .expect("the Dockerfile sets USER");
    let uid = user.split(':').next().unwrap_or_default();
    assert!(
        uid != "root" && uid != "0",
        "the image runs as root ({user})"
    );
    assert!(
        dockerfile
            .instructions("VOLUME")
            .any(|volume| volume.contains(dockerfile.env["PALISADE_DATA_DIR"].as_str())),
        "PALISADE_DATA_DIR is not a VOLUME"
    );

    // The packages built exist, and the binaries shipped are theirs.
    let packages = workspace_packages();
    let built: Vec<&str> = {
        // The words of the `cargo build` command, up to the next `&&`.
        let cargo_build = runs
            .split("cargo build")
            .nth(1)
            .expect("the Dockerfile runs `cargo build`");
        let command = cargo_build.split("&&").next().unwrap_or_default();
        let words: Vec<&str> = command.split_whitespace().collect();
        words
            .windows(2)
            .filter(|pair| pair[0] == "-p")
            .map(|pair| pair[1])
            .collect()
    };
    for package in [
        "palisade-cli",
        "palisade-server",
        "example-gc-pause",
        "example-flash-sale",
    ] {
        assert!(
            built.contains(&package),
            "the Dockerfile does not build {package}"
        );
    }
    let mut binaries_built = BTreeSet::new();
    for package in &built {
        let binaries = packages.get(*package).unwrap_or_else(|| {
            panic!("the Dockerfile builds `{package}`, no such workspace package")
        });
        binaries_built.extend(binaries.iter().cloned());
    }
    let shipped: BTreeSet<String> = runs
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("target/release/"))
        .map(str::to_owned)
        .collect();
    assert!(shipped.len() >= 4, "shipped binaries: {shipped:?}");
    for binary in &shipped {
        assert!(
            binaries_built.contains(binary),
            "ships {binary}, which no built package makes"
        );
    }

    // Everything the deploy files run is shipped.
    let default_command = dockerfile
        .instructions("CMD")
        .last()
        .expect("CMD")
        .to_owned();
    let mut programs = vec![(
        "Dockerfile CMD".to_owned(),
        json_words(&default_command)[0].clone(),
    )];
    let compose = compose();
    for name in service_names(&compose) {
        let service = &compose["services"][name.as_str()];
        if text(&service["build"]["dockerfile"]) == "deploy/Dockerfile" {
            let program = command(service).first().cloned().unwrap_or_default();
            programs.push((format!("compose {name}"), program));
        }
    }
    for (_, container) in containers(&k8s_manifests()) {
        let program = strings(&container["command"])
            .first()
            .cloned()
            .unwrap_or_default();
        programs.push((format!("k8s {}", text(&container["name"])), program));
    }
    let unit = read("deploy/systemd/palisade-server.service");
    let exec_start = unit_value(&unit, "ExecStart").expect("ExecStart");
    let program = exec_start.split_whitespace().next().unwrap_or_default();
    programs.push((
        "systemd ExecStart".to_owned(),
        program.rsplit('/').next().unwrap_or_default().to_owned(),
    ));
    assert!(programs.len() >= 5, "{programs:?}");
    for (place, program) in &programs {
        assert!(
            shipped.contains(program),
            "{place} runs `{program}`, which the image does not ship"
        );
    }
}

#[test]
fn the_systemd_unit_reads_its_environment_file_and_stops_gracefully() {
    let unit = read("deploy/systemd/palisade-server.service");
    let exec_start = unit_value(&unit, "ExecStart").expect("ExecStart");
    assert!(
        exec_start.ends_with("palisade serve") || exec_start.ends_with("palisade-server"),
        "ExecStart `{exec_start}` does not run the resource server"
    );
    let environment_file = unit_value(&unit, "EnvironmentFile").expect("EnvironmentFile");
    let file_name = environment_file
        .trim_start_matches('-')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    assert!(
        root().join("deploy/systemd").join(file_name).is_file(),
        "EnvironmentFile {environment_file} has no template deploy/systemd/{file_name}"
    );
    assert_eq!(unit_value(&unit, "KillSignal").as_deref(), Some("SIGTERM"));
    let timeout = unit_value(&unit, "TimeoutStopSec").expect("TimeoutStopSec");
    assert!(
        timeout
            .trim_end_matches('s')
            .parse::<u64>()
            .is_ok_and(|seconds| seconds >= 30),
        "TimeoutStopSec={timeout} leaves too little time to flush"
    );
    // The data directory is the state directory systemd creates for the unit.
    let state_directory = unit_value(&unit, "StateDirectory").expect("StateDirectory");
    let data_dir = unit
        .lines()
        .filter_map(|line| line.strip_prefix("Environment="))
        .find_map(|assignment| assignment.strip_prefix("PALISADE_DATA_DIR="))
        .expect("the unit sets PALISADE_DATA_DIR");
    assert_eq!(
        data_dir,
        format!("/var/lib/{state_directory}"),
        "data dir vs StateDirectory"
    );
}

#[test]
fn the_operations_guide_names_exactly_the_exported_metrics() {
    let server: BTreeSet<String> = palisade::server::exported_metric_names()
        .into_iter()
        .collect();
    assert!(server.len() >= 5, "metrics the server exports: {server:?}");
    // The operations guide also documents the lock side's metrics.
    let everything: BTreeSet<String> = server
        .iter()
        .cloned()
        .chain(palisade_metrics::LockMetrics::exported_names())
        .collect();
    // Crate names (`palisade_store` in a log filter) are not metrics.
    let crate_names: BTreeSet<String> = workspace_packages()
        .into_keys()
        .map(|package| package.replace('-', "_"))
        .collect();
    for (document, exported) in [
        ("docs/operations.md", &everything),
        ("docs/http-api.md", &server),
    ] {
        let named: BTreeSet<String> = metric_tokens(&read(document))
            .into_iter()
            .filter(|name| !crate_names.contains(name))
            .map(|name| {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| {
                        name.strip_suffix(suffix)
                            .filter(|base| exported.contains(*base))
                    })
                    .map(str::to_owned)
                    .unwrap_or(name)
            })
            .collect();
        assert_eq!(
            &named, exported,
            "{document}: metrics named vs metrics exported"
        );
    }
}

// --- One place where a variable is set ---------------------------------------------

/// A `PALISADE_*` variable set somewhere in `deploy/`.
#[derive(Debug)]
struct Setting {
    /// Where: "compose palisade-a", "k8s ConfigMap palisade-server", ...
    place: String,
    name: String,
    value: String,
}

fn all_settings() -> Vec<Setting> {
    let mut settings = Vec::new();
    let mut add = |place: String, variables: BTreeMap<String, String>| {
        for (name, value) in variables {
            if name.starts_with("PALISADE_") {
                settings.push(Setting {
                    place: place.clone(),
                    name,
                    value,
                });
            }
        }
    };
    let compose = compose();
    for name in service_names(&compose) {
        add(
            format!("compose {name}"),
            environment(&compose["services"][name.as_str()]),
        );
    }
    for (file, manifest) in k8s_manifests() {
        let kind = text(&manifest["kind"]);
        if kind == "ConfigMap" {
            let name = text(&manifest["metadata"]["name"]);
            add(
                format!("k8s ConfigMap {name}"),
                string_map(&manifest["data"]),
            );
        }
        let pod = match kind {
            "StatefulSet" | "Deployment" | "DaemonSet" => &manifest["spec"]["template"]["spec"],
            _ => continue,
        };
        for container in pod["containers"].as_vec().into_iter().flatten() {
            let mut variables = BTreeMap::new();
            for variable in container["env"].as_vec().into_iter().flatten() {
                // A value from a Secret cannot be checked here, the name can.
                let value = scalar(&variable["value"]).unwrap_or_default();
                variables.insert(text(&variable["name"]).to_owned(), value);
            }
            add(
                format!("k8s {file} {}", text(&container["name"])),
                variables,
            );
        }
    }
    for file in deploy_files() {
        let is_env_file = file.extension().is_some_and(|extension| extension == "env");
        let is_unit = file
            .extension()
            .is_some_and(|extension| extension == "service");
        if is_env_file || is_unit {
            let mut variables = BTreeMap::new();
            for line in read_path(&file).lines() {
                let assignment = if is_unit {
                    line.strip_prefix("Environment=")
                } else {
                    Some(line)
                };
                if let Some((name, value)) = assignment.and_then(|line| line.trim().split_once('='))
                {
                    if !name.starts_with('#') {
                        variables.insert(name.to_owned(), value.to_owned());
                    }
                }
            }
            add(format!("systemd {}", relative(&file)), variables);
        }
    }
    add("Dockerfile ENV".to_owned(), dockerfile().env);
    settings
}

fn check_value(setting: &Setting) {
    let Setting { place, name, value } = setting;
    if value.is_empty() {
        return; // from a Secret
    }
    let allowed_values = |table: &[(&str, &str)]| table.iter().any(|(allowed, _)| allowed == value);
    match name.as_str() {
        "PALISADE_LISTEN" => assert!(
            value.parse::<SocketAddr>().is_ok(),
            "{place}: PALISADE_LISTEN={value} is not an address:port"
        ),
        "PALISADE_DURABILITY" => assert!(
            allowed_values(DURABILITY_VALUES),
            "{place}: PALISADE_DURABILITY={value} is not flushed|buffered"
        ),
        "PALISADE_LIVE_CHECK" => assert!(
            allowed_values(LIVE_CHECK_VALUES),
            "{place}: PALISADE_LIVE_CHECK={value} is not none|etcd|redis"
        ),
        "PALISADE_DATA_DIR" => {
            assert!(value.starts_with('/'), "{place}: relative data dir {value}")
        }
        "PALISADE_REDIS_URL" => assert!(
            value.starts_with("redis://") || value.starts_with("rediss://"),
            "{place}: PALISADE_REDIS_URL={value}"
        ),
        "PALISADE_ETCD_ENDPOINTS" => {
            for endpoint in value.split(',') {
                let port = endpoint.rsplit(':').next().unwrap_or_default();
                assert!(
                    port.parse::<u16>().is_ok(),
                    "{place}: etcd endpoint `{endpoint}` has no port"
                );
            }
        }
        numeric if NUMERIC_VARIABLES.contains(&numeric) => assert!(
            value.parse::<u64>().is_ok(),
            "{place}: {name}={value} is not a number"
        ),
        _ => {}
    }
}

// --- Compose helpers -------------------------------------------------------------------

fn compose() -> Yaml {
    let mut documents = load_yaml(&root().join("deploy/compose.yaml"));
    assert_eq!(documents.len(), 1, "compose.yaml: one document");
    documents.remove(0)
}

fn service_names(compose: &Yaml) -> Vec<String> {
    compose["services"]
        .as_hash()
        .expect("compose.yaml has services")
        .keys()
        .map(|name| text(name).to_owned())
        .collect()
}

fn etcd_members(compose: &Yaml) -> Vec<String> {
    service_names(compose)
        .into_iter()
        .filter(|name| text(&compose["services"][name.as_str()]["image"]).contains("/etcd:"))
        .collect()
}

/// Services that run the resource server.
fn resource_servers(compose: &Yaml) -> Vec<String> {
    service_names(compose)
        .into_iter()
        .filter(|name| {
            let arguments = command(&compose["services"][name.as_str()]);
            matches!(
                arguments
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .as_slice(),
                ["palisade", "serve", ..] | ["palisade-server", ..]
            )
        })
        .collect()
}

/// The service's command as a list of words (the image's CMD is not read).
fn command(service: &Yaml) -> Vec<String> {
    match &service["command"] {
        Yaml::String(line) => line.split_whitespace().map(str::to_owned).collect(),
        other => strings(other),
    }
}

/// `--flag=value` or `--flag value`.
fn flag_value(arguments: &[String], flag: &str) -> Option<String> {
    arguments.iter().enumerate().find_map(|(index, argument)| {
        if let Some(value) = argument
            .strip_prefix(flag)
            .and_then(|rest| rest.strip_prefix('='))
        {
            Some(value.to_owned())
        } else if argument == flag {
            arguments.get(index + 1).cloned()
        } else {
            None
        }
    })
}

/// A service's environment, from the map or the list form.
fn environment(service: &Yaml) -> BTreeMap<String, String> {
    match &service["environment"] {
        Yaml::Hash(_) => string_map(&service["environment"]),
        Yaml::Array(entries) => entries
            .iter()
            .filter_map(|entry| text(entry).split_once('='))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// The named volume (declared at the top level) mounted at `path`.
fn named_volume_at(compose: &Yaml, service: &Yaml, path: &str) -> Option<String> {
    let declared = compose["volumes"].as_hash()?;
    service["volumes"].as_vec()?.iter().find_map(|mount| {
        let (source, target) = match mount {
            Yaml::String(short) => {
                let mut parts = short.split(':');
                (parts.next()?.to_owned(), parts.next()?.to_owned())
            }
            long => (
                text(&long["source"]).to_owned(),
                text(&long["target"]).to_owned(),
            ),
        };
        let is_named = declared.contains_key(&Yaml::String(source.clone()));
        (target == path && is_named).then_some(source)
    })
}

fn assert_depends_on(service: &Yaml, dependency: &str, name: &str) {
    assert!(
        !service["depends_on"][dependency].is_badvalue(),
        "compose {name} uses {dependency} but does not depend on it"
    );
}

// --- Kubernetes helpers ----------------------------------------------------------------

/// Every document of every YAML file in deploy/k8s, with its file name.
fn k8s_manifests() -> Vec<(String, Yaml)> {
    let mut manifests = Vec::new();
    for file in yaml_files() {
        let name = relative(&file);
        if name.starts_with("deploy/k8s/") {
            for document in load_yaml(&file) {
                manifests.push((name.clone(), document));
            }
        }
    }
    assert!(
        manifests.len() >= 4,
        "deploy/k8s holds {} manifests",
        manifests.len()
    );
    manifests
}

fn config_map_data(manifests: &[(String, Yaml)]) -> BTreeMap<String, String> {
    let maps: Vec<&Yaml> = manifests
        .iter()
        .filter(|(_, manifest)| text(&manifest["kind"]) == "ConfigMap")
        .map(|(_, manifest)| manifest)
        .collect();
    assert_eq!(maps.len(), 1, "expected one ConfigMap");
    string_map(&maps[0]["data"])
}

/// Every container of every workload, with the file it is in.
fn containers(manifests: &[(String, Yaml)]) -> Vec<(String, &Yaml)> {
    let mut found = Vec::new();
    for (file, manifest) in manifests {
        if matches!(
            text(&manifest["kind"]),
            "StatefulSet" | "Deployment" | "DaemonSet"
        ) {
            for container in manifest["spec"]["template"]["spec"]["containers"]
                .as_vec()
                .into_iter()
                .flatten()
            {
                found.push((file.clone(), container));
            }
        }
    }
    assert!(!found.is_empty(), "no containers in deploy/k8s");
    found
}

/// A container's ports by name (and by number, under their number).
fn container_ports(container: &Yaml) -> BTreeMap<String, u16> {
    let mut ports = BTreeMap::new();
    for port in container["ports"].as_vec().into_iter().flatten() {
        let number = port["containerPort"]
            .as_i64()
            .and_then(|number| u16::try_from(number).ok())
            .expect("containerPort is a port number");
        ports.insert(number.to_string(), number);
        if let Some(name) = port["name"].as_str() {
            ports.insert(name.to_owned(), number);
        }
    }
    ports
}

/// A probe's or Service's port (a name or a number), if it is a container port.
fn resolve_port(port: &Yaml, container_ports: &BTreeMap<String, u16>) -> Option<u16> {
    container_ports.get(&scalar(port)?).copied()
}

// --- Dockerfile ------------------------------------------------------------------------

/// The Dockerfile as logical lines (continuations joined, comments dropped).
struct Dockerfile {
    lines: Vec<String>,
    /// The final stage's `ENV` settings.
    env: BTreeMap<String, String>,
}

impl Dockerfile {
    /// The arguments of every instruction of this kind, in order.
    fn instructions<'a>(&'a self, keyword: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.lines.iter().filter_map(move |line| {
            let (first, rest) = line.split_once(char::is_whitespace)?;
            first.eq_ignore_ascii_case(keyword).then_some(rest.trim())
        })
    }
}

fn dockerfile() -> Dockerfile {
    let source = read("deploy/Dockerfile");
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in source.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    let mut dockerfile = Dockerfile {
        lines,
        env: BTreeMap::new(),
    };
    let mut env = BTreeMap::new();
    for line in &dockerfile.lines {
        if line.starts_with("FROM ") {
            env.clear(); // a new stage starts with no ENV of ours
        } else if let Some(assignments) = line.strip_prefix("ENV ") {
            for assignment in assignments.split_whitespace() {
                if let Some((name, value)) = assignment.split_once('=') {
                    env.insert(name.to_owned(), value.to_owned());
                }
            }
        }
    }
    dockerfile.env = env;
    dockerfile
}

/// `["a", "b"]` (an exec-form instruction) as its words.
fn json_words(exec_form: &str) -> Vec<String> {
    exec_form
        .trim_matches(|character| character == '[' || character == ']')
        .split(',')
        .map(|word| word.trim().trim_matches('"').to_owned())
        .collect()
}

/// Workspace package names, each with the binaries it builds.
fn workspace_packages() -> BTreeMap<String, BTreeSet<String>> {
    let mut packages = BTreeMap::new();
    for folder in ["crates", "examples"] {
        for entry in std::fs::read_dir(root().join(folder)).expect("workspace folder") {
            let directory = entry.expect("directory entry").path();
            let manifest_path = directory.join("Cargo.toml");
            if !manifest_path.is_file() {
                continue;
            }
            let manifest = read_path(&manifest_path);
            let mut section = String::new();
            let mut package_name = None;
            let mut binaries = BTreeSet::new();
            let mut main_is_named = false;
            for line in manifest.lines().map(str::trim) {
                if line.starts_with('[') {
                    section = line.to_owned();
                    continue;
                }
                let Some((key, value)) = line.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"').to_owned();
                match (section.as_str(), key.trim()) {
                    ("[package]", "name") => package_name = Some(value),
                    ("[[bin]]", "name") => {
                        binaries.insert(value);
                    }
                    ("[[bin]]", "path") if value == "src/main.rs" => main_is_named = true,
                    _ => {}
                }
            }
            let package_name = package_name.expect("[package] name");
            if directory.join("src/main.rs").is_file() && !main_is_named {
                binaries.insert(package_name.clone());
            }
            packages.insert(package_name, binaries);
        }
    }
    packages
}

// --- systemd ---------------------------------------------------------------------------

/// The last `Key=value` of a unit file.
fn unit_value(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .filter_map(|line| line.trim().strip_prefix(key)?.strip_prefix('='))
        .next_back()
        .map(|value| value.trim().to_owned())
}

// --- Text and YAML ---------------------------------------------------------------------

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is inside the workspace")
        .to_path_buf()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

fn read(relative_path: &str) -> String {
    read_path(&root().join(relative_path))
}

fn read_path(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", relative(path)))
}

/// Every file under deploy/, recursively, sorted.
fn deploy_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![root().join("deploy")];
    while let Some(folder) = folders.pop() {
        for entry in
            std::fs::read_dir(&folder).unwrap_or_else(|error| panic!("{folder:?}: {error}"))
        {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                folders.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn yaml_files() -> Vec<PathBuf> {
    deploy_files()
        .into_iter()
        .filter(|file| {
            file.extension()
                .is_some_and(|extension| extension == "yaml" || extension == "yml")
        })
        .collect()
}

fn load_yaml(file: &Path) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read_path(file))
        .unwrap_or_else(|error| panic!("{}: not valid YAML: {error}", relative(file)))
}

/// A string node's text, or "" for anything else (so comparisons fail clearly).
fn text(node: &Yaml) -> &str {
    node.as_str().unwrap_or_default()
}

/// A scalar node as text: strings, numbers, booleans.
fn scalar(node: &Yaml) -> Option<String> {
    match node {
        Yaml::String(value) | Yaml::Real(value) => Some(value.clone()),
        Yaml::Integer(value) => Some(value.to_string()),
        Yaml::Boolean(value) => Some(value.to_string()),
        _ => None,
    }
}

/// A sequence of scalars as text.
fn strings(node: &Yaml) -> Vec<String> {
    node.as_vec()
        .into_iter()
        .flatten()
        .filter_map(scalar)
        .collect()
}

/// A mapping of scalars as text.
fn string_map(node: &Yaml) -> BTreeMap<String, String> {
    node.as_hash()
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| Some((scalar(key)?, scalar(value).unwrap_or_default())))
        .collect()
}

fn is_subset(small: &BTreeMap<String, String>, large: &BTreeMap<String, String>) -> bool {
    !small.is_empty()
        && small
            .iter()
            .all(|(key, value)| large.get(key) == Some(value))
}

/// The port of a `PALISADE_LISTEN` setting.
fn listen_port(variables: &BTreeMap<String, String>, place: &str) -> u16 {
    let listen = variables
        .get("PALISADE_LISTEN")
        .unwrap_or_else(|| panic!("{place}: no PALISADE_LISTEN"));
    listen
        .parse::<SocketAddr>()
        .unwrap_or_else(|error| panic!("{place}: PALISADE_LISTEN={listen}: {error}"))
        .port()
}

/// The host of `scheme://host:port/...`, `host:port` or `host`.
fn url_host(url: &str) -> &str {
    let without_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = without_scheme.split('/').next().unwrap_or_default();
    let host_and_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, rest)| rest);
    host_and_port.split(':').next().unwrap_or_default()
}

/// Every `env = "NAME"` in a clap definition.
fn clap_env_names(source: &str) -> BTreeSet<String> {
    source
        .split("env = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// Every `PALISADE_[A-Z0-9_]+` token in a text.
fn palisade_tokens(text: &str) -> Vec<String> {
    tokens_with_prefix(text, "PALISADE_", |character| {
        character.is_ascii_uppercase() || character.is_ascii_digit() || character == '_'
    })
    .into_iter()
    .map(|(token, _)| token)
    .collect()
}

/// Every `palisade_[a-z0-9_]+` token in a text that is not a path into a
/// crate (`palisade_core::Sequencer`): the metric names.
fn metric_tokens(text: &str) -> BTreeSet<String> {
    tokens_with_prefix(text, "palisade_", |character| {
        character.is_ascii_lowercase() || character.is_ascii_digit() || character == '_'
    })
    .into_iter()
    .filter(|(_, after)| !after.starts_with("::"))
    .map(|(token, _)| token.trim_end_matches('_').to_owned())
    .collect()
}

/// Every whole-word token starting with `prefix`, with the text after it.
fn tokens_with_prefix<'a>(
    text: &'a str,
    prefix: &str,
    continues: impl Fn(char) -> bool,
) -> Vec<(String, &'a str)> {
    let mut tokens = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(prefix) {
        let preceded_by_word = rest[..start]
            .chars()
            .next_back()
            .is_some_and(|character| character.is_ascii_alphanumeric() || character == '_');
        let after = &rest[start + prefix.len()..];
        let length = after
            .find(|character| !continues(character))
            .unwrap_or(after.len());
        if !preceded_by_word && length > 0 {
            tokens.push((format!("{prefix}{}", &after[..length]), &after[length..]));
        }
        rest = &after[length..];
    }
    tokens
}
