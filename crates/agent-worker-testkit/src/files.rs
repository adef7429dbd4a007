//! Real files made for tests and benchmarks: a PDF with a text layer, and a scanned one without.

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
        objects.push(packed_stream("", content.as_bytes()));
    }
    assemble(&objects)
}

/// A scanned page: one PDF page that is a picture (64×64 grey pixels, drawn 200 pt wide) and has
/// no text layer, so nothing reads words from it; only a model that reads the page itself does.
pub fn scanned_pdf() -> Vec<u8> {
    let pixels: Vec<u8> = (0..64u32 * 64)
        .map(|i| ((i * 7 + i / 64 * 13) % 256) as u8)
        .collect();
    let objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Count 1 /Kids [3 0 R] >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /XObject << /Im1 4 0 R >> >> /Contents 5 0 R >>"
            .to_vec(),
        packed_stream(
            "/Type /XObject /Subtype /Image /Width 64 /Height 64 /ColorSpace /DeviceGray /BitsPerComponent 8 ",
            &pixels,
        ),
        packed_stream("", b"q 200 0 0 200 72 500 cm /Im1 Do Q\n"),
    ];
    assemble(&objects)
}

/// A stream object of `bytes`, compressed with `FlateDecode`, its dictionary starting `dict`.
fn packed_stream(dict: &str, bytes: &[u8]) -> Vec<u8> {
    let packed = compress_to_vec_zlib(bytes, 6);
    let mut object = format!(
        "<< {dict}/Length {} /Filter /FlateDecode >>\nstream\n",
        packed.len()
    )
    .into_bytes();
    object.extend_from_slice(&packed);
    object.extend_from_slice(b"\nendstream");
    object
}

/// A PDF of `objects` (numbered from 1, the first the catalog), with its cross-reference table.
fn assemble(objects: &[Vec<u8>]) -> Vec<u8> {
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
