//! The table's items as DynamoDB measures them, for the tests that check every item fits.

use agent_worker_testkit::moto;

/// Every item of `table`, measured as DynamoDB measures it: its attributes' names and values.
pub async fn item_sizes(table: &str) -> Vec<(String, usize)> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let size = |value: &AttributeValue| match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => n.len(),
        AttributeValue::B(b) => b.as_ref().len(),
        other => format!("{other:?}").len(),
    };
    let mut pages = moto()
        .dynamodb()
        .scan()
        .table_name(table)
        .into_paginator()
        .items()
        .send();
    let mut sizes = Vec::new();
    while let Some(item) = pages.next().await {
        let item = item.unwrap();
        let sk = item
            .get("sk")
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default();
        sizes.push((
            sk,
            item.iter().map(|(name, value)| name.len() + size(value)).sum(),
        ));
    }
    sizes
}
