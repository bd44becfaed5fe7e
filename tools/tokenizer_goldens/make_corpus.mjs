// Writes tests/data/tokenizers/corpus.jsonl: hand-made texts that stress byte-level BPE tokenizers
// (pre-tokenizer regexes, added-token matching, normalizers, byte fallback of every UTF-8 length).
// Deterministic: no randomness except a fixed-seed PRNG; the output is committed, this script is
// only needed to change it.
//
// Usage: node tools/tokenizer_goldens/make_corpus.mjs [OUT_JSONL]
//        (default: tests/data/tokenizers/corpus.jsonl relative to the repo root)
// Each line is {"text": ...} (JSON.stringify: non-ASCII as raw UTF-8, control characters escaped).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? path.join(here, "..", "..", "tests", "data", "tokenizers", "corpus.jsonl");

// mulberry32, fixed seed: deterministic pseudo-random filler.
let seed = 0x5eed1234;
function rand() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (s) => s[Math.floor(rand() * s.length)];
const word = (alphabet, n) => Array.from({ length: n }, () => pick(alphabet)).join("");

const T = [];
const add = (...xs) => T.push(...xs);

// ---------------------------------------------------------------- edge cases, single characters
add("", "a", "A", "Z", "0", "9", " ", "  ", "\n", "\t", "\r", "!", ".", "'", '"', "é", "ß", "中", "あ", "ア",
  "한", "й", "λ", "א", "ع", "क", "ก", "🙂", "€", "\u00a0", "\u3000", "\u0301", "\u{10ffff}", "\ue000",
  "\ufffd", "\u0000", "a\u0000b", "\u007f", "\u0080\u0085\u009f", "\u0001\u0002\u0003", "\u001b[31mred\u001b[0m");

// ---------------------------------------------------------------- English prose
add(
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
  "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse, and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of the world.",
  "In the beginning the Universe was created. This has made a lot of people very angry and been widely regarded as a bad move.",
  "A tokenizer splits text into pieces.\nEach piece maps to an integer id.\n\nThe model only ever sees the ids.",
  "Dr. Smith arrived at 3 p.m. on Jan. 5th, i.e. later than expected (cf. the schedule, p. 12).",
  "\"Quoted speech,\" she said, \"can contain 'nested quotes' too.\"",
  "“Curly quotes” and ‘single curly quotes’ are different bytes from \"straight\" ones.",
  "ALL CAPS SENTENCES ARE SHOUTING, AREN'T THEY? YES THEY ARE.",
  "mIxEd CaSe WoRdS lIkE tHiS aRe AnNoYiNg.",
  "camelCaseIdentifier PascalCaseIdentifier snake_case_identifier kebab-case-identifier SCREAMING_SNAKE_CASE",
  "iPhone, eBay, McDonald's, O'Reilly, GPT-4o, x86_64, C++17, .NET, Node.js",
  "Semicolons; colons: dashes – and em-dashes — and ellipses… all appear in prose.",
  "She sells sea shells by the sea shore. The shells she sells are surely seashells.",
  "    Indented paragraph with four leading spaces.\n    And a second indented line.",
  "Line one.\nLine two.\nLine three.\n",
  "Sentence one.  Sentence two with two spaces before it.   Three spaces.",
  "The résumé of the naïve café owner mentioned her rôle in the coöperative.",
  "Straße, Größe, Übung, Ärger, Öl — German umlauts and the eszett.",
  "Façade, garçon, déjà vu, crème brûlée, piñata, jalapeño, smörgåsbord.",
);

// ---------------------------------------------------------------- contractions
add(
  "I'm here, you're there, we've been, they'll go, he'd say, it's fine, don't stop, can't won't shouldn't.",
  "I'M HERE, YOU'RE THERE, WE'VE BEEN, THEY'LL GO, HE'D SAY, IT'S FINE, DON'T STOP.",
  "John'S dog'S bone'S — uppercase 'S after lowercase letters.",
  "'s 't 're 've 'm 'll 'd",
  "'S 'T 'RE 'VE 'M 'LL 'D",
  "'Re 'rE 'Ll 'lL 'Ve",
  "it's its it’s it‘s it`s",
  "rock'n'roll, 'twas, o'clock, the '90s, y'all'd've",
  "x's's's 'll'll 'd'd",
  "''", "'''", "' '", "don''t", "'hello'", "'s", "'S",
  "He said 'it's mine' and left.",
  "l'homme, l'été, aujourd'hui, c'est, qu'il",
  "Let's'", "1's 2'nd 3'rd",
);

// ---------------------------------------------------------------- code
add(
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "import numpy as np\n\nx = np.arange(10, dtype=np.float32)\nprint(f\"{x.mean():.3f} ± {x.std():.3f}\")\n",
  "class Foo(Base):\n    \"\"\"Docstring with 'quotes'.\"\"\"\n\n    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n        self._cache = {}\n",
  "for i, (k, v) in enumerate(sorted(d.items(), key=lambda kv: -kv[1])):\n\tprint(i, k, v)  # tab-indented\n",
  "async def main() -> None:\n    async with aiohttp.ClientSession() as s:\n        r = await s.get('https://example.com')\n",
  "lambda x: x**2 if x >= 0 else -x // 3 % 7 @ m",
  "#include <vector>\n#include <cstdint>\n\nint main(int argc, char** argv) {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n  return 0;\n}\n",
  "template <typename T, std::size_t N>\nconstexpr auto sum(const std::array<T, N>& a) noexcept -> T {\n    T s{};\n    for (const auto& x : a) s += x;\n    return s;\n}\n",
  "auto p = std::make_unique<Foo>(); p->bar(); if (a && !b || c != d) { x <<= 2; y >>= 1; }",
  "__global__ void add(const float* __restrict__ a, float* b, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) b[i] += a[i];\n}\n",
  "/* block comment */ // line comment\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
  "const f = async (x) => {\n  const { a, b = 2, ...rest } = await fetch(`/api/${x}?q=1`).then(r => r.json());\n  return a ?? b;\n};\n",
  "function* gen() { yield* [1, 2, 3]; }\nexport default class extends React.Component {}\n",
  "if (x === null || typeof y !== 'undefined') console.log('%c styled', 'color: red');",
  "#!/usr/bin/env bash\nset -euo pipefail\nfor f in \"$@\"; do\n  echo \"${f%.txt}.md\" >&2\ndone\n",
  "grep -rn 'TODO' src/ | awk -F: '{print $1}' | sort | uniq -c | sort -rn | head -20",
  "export PATH=\"$HOME/.local/bin:$PATH\" && cd /tmp && tar -xzf pkg.tar.gz 2>/dev/null || true",
  "{\"name\": \"deepinfer\", \"version\": \"1.0.0\", \"tags\": [\"a\", \"b\"], \"nested\": {\"x\": 1.5e-3, \"ok\": true, \"none\": null}}",
  "{\n  \"vocab_size\": 129280,\n  \"hidden_size\": 7168,\n  \"rope_theta\": 10000.0,\n  \"torch_dtype\": \"bfloat16\"\n}\n",
  "[{\"id\":1,\"text\":\"\\u00e9\\n\"},{\"id\":2,\"text\":\"\\\"quoted\\\"\"}]",
  "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
  "func main() {\n\tch := make(chan int, 10)\n\tgo func() { ch <- 42 }()\n\tfmt.Println(<-ch)\n}\n",
  "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total > 100 GROUP BY u.id HAVING n >= 3;",
  "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Test</title></head>\n<body><p class=\"x\">Hi &amp; bye</p></body>\n</html>\n",
  ".btn:hover > span::after { content: '→'; margin: 0 4px !important; color: #ff00aa; }",
  "key: value\nlist:\n  - one\n  - two\nnested:\n  deep: {a: 1, b: [x, y]}\n",
  "all: build\n\nbuild:\n\t$(CC) -O2 -o $@ $^ $(LDFLAGS)\n",
  "diff --git a/x.c b/x.c\n--- a/x.c\n+++ b/x.c\n@@ -1,3 +1,3 @@\n-int x = 1;\n+int x = 2;\n",
  "\\documentclass{article}\n\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}",
  "x=1;y=2;z=x+y*3-4/5%6^7&8|9~0",
  "a->b.c[d]::e<f>(g){h}",
  "0x7fffffff 0b101010 0o777 1e-9 3.14f 2.0L 1_000_000 100ULL",
);

// ---------------------------------------------------------------- numbers
const digits = "31415926535897932384626433832795";
for (let n = 1; n <= 20; n++) add(digits.slice(0, n));
add(
  "0", "00", "007", "1000000", "9999999999", "12345678901234567890123",
  "3.14", "0.001", "-42", "-0.5", "+7", "1e10", "6.022e23", "-1.6e-19", "1.", ".5",
  "1,234,567", "1,234,567.89", "1.234.567,89", "1 234 567", "1\u00a0234\u00a0567", "1\u202f234\u202f567", "12'345'678",
  "$1,299.99", "€5", "£3.50", "¥1000", "₹2,50,000", "100%", "50°C", "-273.15 K",
  "2024-01-15", "2024-01-15T10:30:00.123Z", "10:30:45", "12/31/1999", "v1.2.3-rc.4+build.5",
  "+1 (555) 123-4567", "192.168.0.1", "::1", "2001:db8::ff00:42:8329", "ISBN 978-3-16-148410-0",
  "abc123def", "123abc", "H2O", "CO2", "1st 2nd 3rd 4th 21st 22nd 101st", "x2 y10 z100 w1000",
  "１２３４５", "٠١٢٣٤٥٦٧٨٩", "۱۲۳", "१२३४५", "๑๒๓", "x² y³ z¹⁰", "½ ¼ ¾ ⅓", "Ⅻ ⅻ Ⅳ", "① ② ⑩", "𝟙𝟚𝟛",
  "1+1=2, 2*3=6, 10/4=2.5, 2^10=1024, 7%3=1",
  "The year 1984 had 366 days; 2023 had 365; 1900 was not a leap year.",
  "Pi is approximately 3.14159265358979323846264338327950288419716939937510.",
  "-1-2-3-4-5", "1..10", "1...3", "0.0.0.0", "999,999,999,999,999",
);

// ---------------------------------------------------------------- CJK
add(
  "中文分词是一个有趣的问题。",
  "我们今天去公园散步，天气非常好！你呢？",
  "機器學習與深度學習的區別是什麼？",
  "人工智能（AI）正在改变世界：从医疗到金融，从教育到交通。",
  "北京、上海、广州和深圳是中国最大的四个城市。",
  "日本語のテキストには、ひらがな、カタカナ、漢字が混在しています。",
  "東京タワーは１９５８年に完成しました。",
  "すもももももももものうち",
  "コンピューター・プログラミング、データベース、ネットワーク",
  "ｶﾀｶﾅ ﾊﾝｶｸ ﾃｷｽﾄ",
  "ゝゞヽヾ〃々〆〇ー〜",
  "한국어 텍스트도 처리할 수 있어야 합니다.",
  "안녕하세요! 만나서 반갑습니다. 오늘 날씨가 좋네요.",
  "ㅋㅋㅋㅋㅋ ㅎㅎㅎ ㅠㅠ",
  "Mixed 中文 and English 混合 text 테스트 テスト.",
  "GPT-4模型在2023年发布，参数量约为1.8万亿。",
  "「引用」『二重引用』【括弧】〈山括弧〉《書名》",
  "全角スペース　で　区切られた　文",
  "𠀀𠀁𠀂 𪚥 𰀀 (CJK extensions B, C and G)",
  "龥龦鿿 豈更車 (edges of the CJK ideograph block and compatibility ideographs)",
  "「すみません、駅はどこですか？」「まっすぐ行って右です。」",
  "中文标点：，。！？；：“”‘’（）",
);

// ---------------------------------------------------------------- other scripts
add(
  "العربية لغة جميلة. مرحبا بالعالم!",
  "بِسْمِ ٱللَّهِ ٱلرَّحْمَٰنِ ٱلرَّحِيمِ",
  "עברית נכתבת מימין לשמאל. שָׁלוֹם עוֹלָם",
  "हिन्दी एक भारतीय भाषा है। नमस्ते दुनिया!",
  "क्षत्रिय श्रृंखला द्वितीय",
  "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำสวัสดีครับ",
  "Русский текст: Съешь же ещё этих мягких французских булок, да выпей чаю.",
  "УКРАЇНСЬКА МОВА: Ґанок, їжак, єнот.",
  "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. ΣΊΣΥΦΟΣ σίσυφος",
  "বাংলা ভাষা, தமிழ் மொழி, తెలుగు, ಕನ್ನಡ, മലയാളം",
  "ქართული ენა, Հայերեն լեզու, አማርኛ ቋንቋ",
  "Tiếng Việt có nhiều dấu: Thành phố Hồ Chí Minh, người, được.",
  "Türkçe: İstanbul, ılık, IĞDIR, ığdır",
  "Polski: Zażółć gęślą jaźń. Čeština: Příliš žluťoučký kůň.",
  "English then עברית then English again.",
  "RLM\u200fmark and LRM\u200emark and \u202eoverride\u202c end",
  "Ⓐⓑⓒ 𝐁𝐨𝐥𝐝 𝕯𝖔𝖚𝖇𝖑𝖊 ｆｕｌｌｗｉｄｔｈ",
  "ᚠᛇᚻ᛫ᛒᛦᚦ ⠓⠑⠇⠇⠕ ꦗꦮ",
);

// ---------------------------------------------------------------- emoji
add(
  "😀😃😄😁😆",
  "I love 🍕 and 🍣!",
  "👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿",
  "👨‍👩‍👧‍👦 family, 👩‍❤️‍👨 couple, 👩🏾‍💻 technologist",
  "🏳️‍🌈 🏳️‍⚧️ 🏴‍☠️",
  "🇺🇸🇯🇵🇩🇪🇫🇷🇨🇳🇰🇷",
  "🇺🇸🇯",
  "🏴󠁧󠁢󠁳󠁣󠁴󠁿 🏴󠁧󠁢󠁷󠁬󠁳󠁿",
  "1️⃣ 2️⃣ #️⃣ *️⃣",
  "❤️ ❤ ☺︎ ☺️ ✔️ ✔",
  "🧑🏽‍🤝‍🧑🏻",
  "Great job!!! 🎉🎉🎉",
  "emoji👏between👏words",
  "🙂\n🙃\r\n😉",
  "💯💯💯💯💯💯💯💯💯💯",
  "(╯°□°)╯︵ ┻━┻  ¯\\_(ツ)_/¯  ( ͡° ͜ʖ ͡°)",
  "♠♣♥♦ ★☆ ✓✗ ☐☑ ⚠ ☢ ♻",
);

// ---------------------------------------------------------------- combining marks / normalization
add(
  "e\u0301 vs \u00e9",
  "cafe\u0301 cafe\u0301s",
  "a\u0300\u0301\u0302\u0303\u0304",
  "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
  "\u212b \u00c5 A\u030a",
  "\ufb01 \ufb02 \u2126 \u2160",
  "\u1100\u1161\u11a8 \uac01",
  " \u0301",
  "\u0301abc",
  "1\u20e3 a\u20dd",
  "n\u0303o\u0308",
  "\u0915\u094d\u0937",
  "\u05e9\u05c1\u05b8",
  "\u0627\u064e\u0644\u0652",
  "o\u0308\u0332 O\u0332\u0308",
);

// ---------------------------------------------------------------- whitespace
add(
  "a\tb", "\t\tindented with tabs", "tab at end\t", "\t", "\t\t\t",
  "\r\n", "line1\r\nline2\r\n", "a\rb", "a\r\rb", "\rstart", "end\r",
  "\n\n\n", "a\n\n\nb", "\n \n", " \n", "\n ", "x \n\n y", "word\n", "\nword",
  "    ", " ".repeat(16), "a  b", "a   b   c", "trailing   ", "  leading", " a ", "  \n  x",
  "a\u00a0b", "\u00a0\u00a0", "non\u00a0breaking\u00a0space",
  "日本\u3000語", "\u3000\u3000indent",
  "\f", "a\fb", "page1\f\npage2",
  "\u000b", "a\u000bb",
  "a\u0085b", "a\u2028b", "a\u2029b",
  "zero\u200bwidth\u200bspace", "\ufeffBOM at start", "a\ufeffb",
  "thin\u2009space, narrow\u202fnbsp, math\u205fspace, mongolian\u180evs, hair\u200aspace, em\u2003space",
  " \t \n \r\n ", "  !", "a  !", "  \n\n  \n  x", "x\t\n\t\ny",
  "end of text with newline\n", "end of text with two newlines\n\n", "spaces then newline   \nnext",
  "1  2   3\t4", "a \u00a0 b", " \u3000 ",
);

// ---------------------------------------------------------------- punctuation
add(
  "!!!", "???!!!", "...", "…", "---", "===", "***", "<<<>>>", "~~~", "::", "->", "=>", "!=", "<=>", "::<>",
  "!@#$%^&*()_+-=[]{}|;':\",./<>?`~",
  "''\"\"``", "»«‹›", "¿¡Qué?!", "——", "Wait... what?!?!", "Hmm.....", "Yes!!!\n\nNo???\r\n",
  " ...\r\n", "(a), [b], {c}, <d>", ":-) ;-) :D :P <3", "#hashtag @mention $TICKER", "a/b\\c|d",
  "—dash—", "•bullet • point", "§ 12 ¶ 3 † ‡", "“”„‟", "«»", "、。・",
  "!\n", "?\r\n", ".\n\n\n",
);

// ---------------------------------------------------------------- URLs, paths, e-mail
add(
  "https://www.example.com/path/to/page.html?query=value&foo=bar#section-2",
  "Visit http://localhost:8080/api/v1/users/42 for details.",
  "git@github.com:owner/repo.git and ssh://user@host:22/path",
  "mailto:first.last+tag@sub.example.co.uk",
  "/usr/local/lib/python3.11/site-packages/numpy/__init__.py",
  "C:\\Users\\Admin\\Documents\\file (1).txt",
  "https://zh.wikipedia.org/wiki/中文 and https://example.com/%E4%B8%AD%E6%96%87",
  "ftp://ftp.example.org/pub/file-1.2.3.tar.gz",
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
);

// ---------------------------------------------------------------- markdown
add(
  "# Heading 1\n\n## Heading 2\n\nSome **bold** and *italic* and `inline code`.\n",
  "- item one\n- item two\n  - nested item\n1. first\n2. second\n",
  "```python\nprint('hello')\n```\n",
  "| col1 | col2 |\n|------|------|\n| a    | 1    |\n| b    | 2    |\n",
  "[link text](https://example.com) and ![image](img.png \"title\")",
  "> blockquote line\n> another line\n\n---\n\n***\n",
  "~~strikethrough~~ __underline__ ***both*** ==highlight== ^sup^ ~sub~",
  "- [ ] todo\n- [x] done\n",
  "$$\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}$$",
);

// ---------------------------------------------------------------- special-token strings inside text
add(
  "<|endoftext|>",
  "Hello<|endoftext|>world",
  "before <|endoftext|> after",
  "<|endoftext|><|endoftext|>",
  "text<|endoftext|>\n\nmore text<|endoftext|>",
  "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
  "<think>\nLet me reason step by step.\n</think>\n\nThe answer is 42.",
  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
  "<tool_response>sunny, 21°C</tool_response>",
  "<|fim_prefix|>def add(a, b):\n<|fim_suffix|>\n    return c<|fim_middle|>",
  "<|vision_start|><|image_pad|><|vision_end|>Describe the image.",
  "<|begin_of_text|>Hello",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
  "<|reserved_special_token_5|> and <|reserved_special_token_250|>",
  "<|end_of_text|>",
  "prompt<|endofprompt|>completion",
  "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
  "<｜begin▁of▁sentence｜><｜User｜>Hi there<｜Assistant｜>Hello!<｜end▁of▁sentence｜>",
  "<｜fim▁begin｜>def f():\n<｜fim▁hole｜>\n<｜fim▁end｜>",
  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
  "<｜place▁holder▁no▁7｜>x",
  "<|EOT|>",
  "<|endoftext|", "<|im_start", "|endoftext|>", "<|ENDOFTEXT|>", "< |endoftext| >", "<<|endoftext|>>",
  "<|end of text|> <|notatoken|> <|im_start |>",
  "print(\"<|endoftext|>\")  # a special token inside a code string",
  "   <|im_start|>   spaces around   <|im_end|>   ",
  "\n<|endoftext|>\n",
  "中文<|im_start|>中文<|im_end|>中文",
  "<｜begin▁of▁sentence｜",
  "<s></s><unk><pad>[CLS][SEP][MASK]",
);

// ---------------------------------------------------------------- repeated characters
for (const n of [2, 3, 4, 5, 8, 16, 33, 64]) add("a".repeat(n));
add(
  "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "AAAAAAAAAAAAAAAAAAAA", "----------------------------------------",
  "........................................", "________________________________________",
  "========================================", "########", "////////", "\\\\\\\\", "!!!!!!!!!!!!!!!!!!!!!!!!!",
  "éééééééééé", "哈哈哈哈哈哈哈哈", "ああああああああ", "ーーーーー", "ㅋㅋㅋㅋㅋㅋㅋㅋㅋㅋ", "wwwwwwwwww",
  "0000000000000000000000000", "1111111111111111111111111", "abababababababababababab", "the the the the the the the the",
  "🙂🙂🙂🙂🙂🙂🙂🙂", " a a a a a a a a", "\n\n\n\n\n\n\n\n\n\n\n\n", "\t\t\t\t\t\t\t\t",
  "lo" + "o".repeat(40) + "ng",
);

// ---------------------------------------------------------------- long texts (~500 chars and more)
add(
  "a".repeat(500),
  "supercalifragilisticexpialidocious".repeat(15),
  word("abcdefghijklmnopqrstuvwxyz", 500),
  word("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", 500),
  word("0123456789", 500),
  " ".repeat(500),
  "!".repeat(500),
  "中".repeat(500),
  word("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年", 500),
  word("あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん", 500),
  "😀".repeat(300),
  "ab".repeat(250),
  "the ".repeat(150),
  "\n".repeat(500),
  word("0123456789abcdef", 512),
  "Pneumonoultramicroscopicsilicovolcanoconiosis" + "Antidisestablishmentarianism".repeat(16),
  "https://example.com/search?" + Array.from({ length: 40 }, (_, i) => `k${i}=${word("abcxyz0189", 8)}`).join("&"),
  Array.from({ length: 60 }, () => pick(["get", "set", "Value", "Manager", "Factory", "Abstract", "Impl", "Bean", "Proxy"])).join(""),
  "é".repeat(250) + "e\u0301".repeat(125),
  word("абвгдеёжзийклмнопрстуфхцчшщъыьэюя", 500),
);

// ---------------------------------------------------------------- random mixtures (fixed seed)
const pieces = [
  "the", "of", "and", " ", "  ", "\n", "\t", "\r\n", ",", ".", "!", "?", "'s", "'LL", "123", "4567", "3.14",
  "中文", "日本語", "ひらがな", "カタカナ", "한국어", "Русский", "ελληνικά", "عربي", "עברית", "हिन्दी", "ไทย",
  "🙂", "👍🏽", "👨‍👩‍👧", "🇯🇵", "e\u0301", "\u00a0", "\u3000", "<|endoftext|>", "<|im_start|>", "<｜User｜>",
  "foo_bar", "fooBar", "x+=1;", "{}", "()", "[]", "->", "::", "http://a.b/c", "$HOME", "#", "//", "/*", "*/",
];
for (let k = 0; k < 25; k++) {
  const n = 5 + Math.floor(rand() * 40);
  add(Array.from({ length: n }, () => pick(pieces)).join(""));
}

// ---------------------------------------------------------------- checks and output
for (const [i, t] of T.entries()) {
  if (typeof t !== "string") throw new Error(`entry ${i} is not a string`);
  // Only Unicode scalar values: no lone surrogates, so the text is valid UTF-8.
  if (!t.isWellFormed()) throw new Error(`entry ${i} has a lone surrogate`);
}
// Drop exact duplicates (keeping the first occurrence) so every line tests something.
const unique = [...new Set(T)];
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, unique.map((t) => JSON.stringify({ text: t }) + "\n").join(""));
console.error(`wrote ${unique.length} texts to ${out} (${T.length - unique.length} duplicates dropped)`);
