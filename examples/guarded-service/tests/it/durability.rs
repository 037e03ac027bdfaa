//! The inventory's durability promise: a change is acknowledged only after
//! sled's files were fsynced (not merely after sled's `flush()`, which stops
//! at the page cache on Linux), and it is there after a reopen.

use example_guarded_service::Inventory;

#[tokio::test]
async fn every_acknowledged_change_was_fsynced_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = Inventory::open(dir.path()).unwrap();
    let before = inventory.syncs();
    for (generation, delta) in [(1, 5), (2, -2), (3, 7)] {
        let item = inventory
            .change("widget", generation, "adjust", delta, |stock| {
                Ok(stock + delta)
            })
            .await
            .unwrap();
        assert_eq!(item.generation, generation);
        assert_eq!(
            inventory.syncs(),
            before + generation,
            "change {generation} was acknowledged without its fsync"
        );
    }
    drop(inventory);

    let inventory = Inventory::open(dir.path()).unwrap();
    let item = inventory.item("widget").unwrap().unwrap();
    assert_eq!((item.stock, item.generation), (10, 3));
    assert_eq!(inventory.ledger("widget").unwrap().len(), 3);
}
