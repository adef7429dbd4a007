//! Real files made for tests and benchmarks: a PDF with a text layer.

use miniz_oxide::deflate::compress_to_vec_zlib;

/// A PDF of one page per entry of `pages`, each page's lines set in Helvetica, its content
/// stream compressed with `FlateDecode`, with a correct cross-reference table.
pub fn pdf(pages: &[&str]) -> Vec<u8> {
    let count = pages.len();
    // Objects: 1 catalog, 2 page tree, 3 font, then a page and its content per page.
    let mut objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!(
            "<< /Type /Pages /Count {count} /Kids [{}] >>",
            (0..count)
                .map(|i| format!("{} 0 R", 4 + 2 * i))
                .collect::<Vec<_>>()
                .join(" ")
        )
        .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    for (i, text) in pages.iter().enumerate() {
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
                5 + 2 * i
            )
            .into_bytes(),
        );
        let mut content = String::from("BT /F1 12 Tf 72 720 Td 14 TL\n");
        for line in text.lines() {
            let escaped = line.replace('\\', "\\\\").replace('(', "\\(").replace(')', "\\)");
            content.push_str(&format!("({escaped}) Tj T*\n"));
        }
        content.push_str("ET\n");
        let packed = compress_to_vec_zlib(content.as_bytes(), 6);
        let mut object =
            format!("<< /Length {} /Filter /FlateDecode >>\nstream\n", packed.len()).into_bytes();
        object.extend_from_slice(&packed);
        object.extend_from_slice(b"\nendstream");
        objects.push(object);
    }
    let mut out = b"%PDF-1.4\n%\xE2\xE3\xCF\xD3\n".to_vec();
    let mut offsets = Vec::with_capacity(objects.len());
    for (i, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(object);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}
