//! How a turn's writes are split into transactions that DynamoDB takes: at most
//! [`MAX_TRANSACTION_ITEMS`] items and [`MAX_TRANSACTION_BYTES`] bytes each, measured as DynamoDB
//! measures items (each attribute's name and value).

use std::collections::HashMap;
use std::ops::Range;

use aws_sdk_dynamodb::types::AttributeValue;

/// The most items one `TransactWriteItems` takes.
pub const MAX_TRANSACTION_ITEMS: usize = 100;

/// The most bytes of items one transaction of this store carries: DynamoDB's 4 MB, less room for
/// the condition checks and updates that ride along, and for its own rounding.
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024 - 128 * 1024;

/// The size of an item as DynamoDB counts it: for each attribute, its name and its value (a
/// string's UTF-8 bytes; a number's digits, about half a byte each, plus one).
pub(super) fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => n.len().div_ceil(2) + 1,
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        // Nothing this store writes; counted generously.
        _ => 1024,
    }
}

/// Splits writes of `sizes` into transactions. The last one also carries `tail_items` more items
/// (the version bump and the turn's end) of `tail_bytes`; every other one carries one more item
/// (the version check). Returns the ranges of the earlier transactions, in order, and the range
/// the last one takes.
///
/// A single write larger than a transaction holds still gets one of its own: DynamoDB then
/// refuses it, and the store says so.
pub(super) fn plan(
    sizes: &[usize],
    tail_items: usize,
    tail_bytes: usize,
) -> (Vec<Range<usize>>, Range<usize>) {
    // The last transaction: as many of the last writes as fit beside the tail's own items.
    let mut start = sizes.len();
    let mut bytes = tail_bytes;
    while start > 0
        && sizes.len() - start + tail_items < MAX_TRANSACTION_ITEMS
        && bytes + sizes[start - 1] <= MAX_TRANSACTION_BYTES
    {
        start -= 1;
        bytes += sizes[start];
    }
    let tail = start..sizes.len();
    // The rest, front to back, each transaction as full as it can be.
    let mut earlier = Vec::new();
    let mut from = 0;
    while from < start {
        let mut to = from;
        let mut bytes = 0;
        while to < start
            && to - from + 1 < MAX_TRANSACTION_ITEMS
            && (to == from || bytes + sizes[to] <= MAX_TRANSACTION_BYTES)
        {
            bytes += sizes[to];
            to += 1;
        }
        earlier.push(from..to);
        from = to;
    }
    (earlier, tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(sizes: &[usize], tail_items: usize, tail_bytes: usize) -> (Vec<Range<usize>>, Range<usize>) {
        let (earlier, tail) = plan(sizes, tail_items, tail_bytes);
        // Every write once, in order.
        let mut next = 0;
        for range in earlier.iter().chain(std::iter::once(&tail)) {
            assert_eq!(range.start, next);
            next = range.end;
        }
        assert_eq!(next, sizes.len());
        for range in &earlier {
            assert!(range.len() < MAX_TRANSACTION_ITEMS);
            assert!(range.len() == 1 || sizes[range.clone()].iter().sum::<usize>() <= MAX_TRANSACTION_BYTES);
        }
        assert!(tail.len() + tail_items <= MAX_TRANSACTION_ITEMS);
        assert!(
            sizes[tail.clone()].iter().sum::<usize>() + tail_bytes <= MAX_TRANSACTION_BYTES
                || tail.len() <= 1
        );
        (earlier, tail)
    }

    #[test]
    fn a_small_turn_is_one_transaction() {
        let (earlier, tail) = check(&[1_000, 2_000], 2, 500);
        assert!(earlier.is_empty());
        assert_eq!(tail, 0..2);
    }

    #[test]
    fn many_small_writes_split_by_count() {
        let (earlier, tail) = check(&[100; 250], 2, 500);
        assert_eq!(tail.len(), MAX_TRANSACTION_ITEMS - 2);
        assert_eq!(earlier.len(), 2);
    }

    #[test]
    fn fifteen_writes_of_300_kb_split_by_bytes() {
        let sizes = [300 * 1024; 15];
        let (earlier, tail) = check(&sizes, 2, 500);
        // 13 × 300 KB fit beside the tail's items; the other two go first, together.
        assert_eq!((earlier.len(), earlier[0].clone(), tail), (1, 0..2, 2..15));
    }

    #[test]
    fn writes_that_fill_a_transaction_exactly_are_not_split_further() {
        let each = MAX_TRANSACTION_BYTES / 4;
        let (earlier, tail) = check(&[each; 8], 0, 0);
        assert_eq!((earlier.len(), earlier[0].clone(), tail), (1, 0..4, 4..8));
    }

    #[test]
    fn an_item_is_measured_by_its_names_and_values() {
        let item = HashMap::from([
            ("pk".to_owned(), AttributeValue::S("session#s".into())),
            ("n".to_owned(), AttributeValue::N("12345".into())),
        ]);
        assert_eq!(item_size(&item), 2 + 9 + 1 + 4);
    }
}
