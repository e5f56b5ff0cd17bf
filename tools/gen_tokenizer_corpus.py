#!/usr/bin/env python3
"""Writes tests/tokenizer_corpus.json: hard strings for the tokenizer oracle test.

Deterministic (no randomness without a fixed seed), so re-running it gives the
same file. Categories: many scripts, emoji (ZWJ, skin tones, flags, keycaps),
combining marks, whitespace runs and mixes, leading/trailing spaces, digits
and long numbers, code (Python, C, JSON, HTML, shell), English contractions
in several cases, special-token text of both test models, very long words,
punctuation runs, URLs, odd Unicode (NEL, NBSP, ZWSP, BOM, U+180E, long s).
"""
import json
import os
import random

rng = random.Random(1234)
S = []

# --- scripts -------------------------------------------------------------------
S += [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "Привет, как дела? Всё хорошо.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "你好，世界！今天天气很好。",
    "我能吞下玻璃而不伤身体。",
    "日本語のテキスト：ひらがな、カタカナ、漢字。",
    "いろはにほへと ちりぬるを わかよたれそ つねならむ",
    "안녕하세요, 세계! 키스의 고유조건은 입술끼리 만나야 하고",
    "مرحبا بالعالم! كيف حالك اليوم؟",
    "أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
    "שלום עולם! אני יכול לאכול זכוכית וזה לא מזיק לי.",
    "नमस्ते दुनिया! मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती।",
    "สวัสดีชาวโลก ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ",
    "Xin chào thế giới! Tôi có thể ăn thủy tinh mà không hại gì.",
    "Ĉu vi parolas Esperanton? Eĥoŝanĝo ĉiuĵaŭde.",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "Pójdźże, kiń tę chmurność w głąb flaszy!",
    "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Árvíztűrő tükörfúrógép",
    "Ça m'a fait plaisir — « guillemets » et œuvre.",
    "¿Dónde está la biblioteca? ¡Olé!",
    "ఆంధ్ర ప్రదేశ్ తెలుగు భాష",
    "தமிழ் மொழி அழகானது",
    "বাংলা ভাষা আমার মাতৃভাষা",
    "ਪੰਜਾਬੀ ਭਾਸ਼ਾ",
    "ગુજરાતી ભાષા",
    "ಕನ್ನಡ ಭಾಷೆ",
    "മലയാളം ഭാഷ",
    "සිංහල භාෂාව",
    "ພາສາລາວ",
    "ភាសាខ្មែរ",
    "မြန်မာဘာသာ",
    "ትግርኛ ቋንቋ አማርኛ",
    "ქართული ენა",
    "Հայերեն լեզու",
    "Монгол хэл ᠮᠣᠩᠭᠣᠯ",
    "ᐃᓄᒃᑎᑐᑦ",
    "ꦧꦱꦗꦮ",
    "𐌰𐌱𐌲 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕳𝖊𝖑𝖑𝖔 𝟙𝟚𝟛",
    "ʻOkina and ʼapostrophe modifier letters",
    "Türkçe: İstanbul, ılık, IĞDIR",
    "ﬁ ﬂ ﬀ ligatures and ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ",
    "Ⅻ Ⅳ ⅷ roman numerals, ½ ¾ ⅓ fractions, ² ³ superscripts",
    "١٢٣٤٥ Arabic-Indic digits, ۱۲۳ Persian digits, १२३ Devanagari digits",
    "中文English混合text测试123",
    "한국어와English섞어서",
    "Ελληνικά και English μαζί",
    "ру́сский с ударе́нием",
]

# --- emoji -----------------------------------------------------------------------
S += [
    "😀",
    "😀😃😄😁😆😅😂🤣",
    "I love 🍕 and 🍣!",
    "👨‍👩‍👧‍👦 family",
    "👩‍💻👨‍🔬🧑‍🚀",
    "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "🇺🇸🇬🇧🇯🇵🇩🇪🇫🇷",
    "🏳️‍🌈 🏴‍☠️",
    "1️⃣ 2️⃣ #️⃣ *️⃣",
    "❤️ ♥ ❤ 💔",
    "🫠🫶🪿🩷 newer emoji",
    "text😀text",
    " 😀 ",
    "😀\n😀\t😀",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland tag sequence",
    "🧔🏽‍♀️ zwj with skin tone",
]

# --- combining marks -------------------------------------------------------------
S += [
    "e\u0301 vs \u00e9",
    "a\u0300\u0301\u0302\u0303\u0304 stacked",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "n\u0303o\u0308",
    "\u0301leading combining mark",
    "क्षत्रिय",
    "한\u1100\u1161 jamo",
    "ﷺ ﷽",
]

# --- whitespace -------------------------------------------------------------------
S += [
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    "\r\n\r\n",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    " both ",
    "a  b   c    d",
    "a\tb\t\tc",
    "line1\nline2\n\nline4\n\n\nline7",
    "windows\r\nline\r\nendings\r\n",
    "mixed \t \n \r\n  \t\t\n",
    "\n\n\n\n\n\n\n\n\n\n",
    "\t\t\t\tindented with tabs",
    "    indented with spaces",
    "   \n   \n   ",
    "word \n word",
    "end\n",
    "\nstart",
    "a\u00a0b nbsp",
    "a\u2003b em space\u3000ideographic space",
    "a\u200bb zero width space",
    "a\u200db zwj \u200c zwnj",
    "\ufeffBOM at start",
    "a\u0085b next line",
    "a\u180eb mongolian vowel separator",
    "a\u2028b\u2029c line/paragraph separators",
    "a\x0bb\x0cc vertical tab form feed",
    "a\x1cb\x1fc info separators",
    "a\x00b nul",
    "\x7f delete \x01\x02 controls",
    " \u00a0 \u2009 \u202f mixed spaces",
    "x" + " " * 50 + "y",
    " " * 33,
    "\n" * 40,
    "\t" * 40,
    " \n" * 20,
    "a\u0085\u0085!b",
    "a\u180e!b",
]

# --- digits -------------------------------------------------------------------------
S += [
    "0",
    "42",
    "123",
    "1234",
    "12345",
    "3.14159265358979323846",
    "1,000,000",
    "1 000 000",
    "-273.15°C",
    "+1 (555) 123-4567",
    "2024-01-15T10:30:00Z",
    "0xDEADBEEF 0b1010 0o777",
    "1e-10 6.022e23",
    "a1b2c3d4",
    "version 1.2.3-beta.4",
    "12345678901234567890123456789012345678901234567890",
    "9" * 100,
    "$100.00 €50 £30 ¥1000",
    "50% off!!! 100%",
    "3/4 cup, 1:2 ratio",
    "a  1",
    "x 12 y  345",
    "IPv4 192.168.0.1 and IPv6 ::1",
]

# --- code ----------------------------------------------------------------------------
S += [
    "def foo(x):\n    return x + 1\n",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)",
    "class Foo:\n    def __init__(self):\n        self.x = []\n\n    def __repr__(self) -> str:\n        return f'Foo({self.x!r})'\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }",
    "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
    '{"name": "tessera", "version": [0, 1, 0], "ok": true, "n": null}',
    '{\n  "a": 1,\n  "b": [\n    "x",\n    "y"\n  ]\n}',
    '<!DOCTYPE html>\n<html><head><title>Hi</title></head><body><p class="x">Hello</p></body></html>',
    "<table><tr><td>1</td><td>2</td></tr></table>",
    "<b>bold</b> <i>italic</i> <code>x = 1</code>",
    "<div><span>nested</span></div>",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    "$ ls -la | grep '\\.c$' && echo \"done\" > /dev/null 2>&1",
    "fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!(\"{:?}\", v); }",
    "const f = async (x) => { await g(x?.y ?? 0); };",
    "x+=1;y-=2;z*=3;w/=4;a%=5;b**=6;c//=7",
    "if (a && b || !c) { return a != b ? a : b; }",
    "std::vector<std::string> v{\"a\", \"b\"};",
    "    \n    pass\n",
    "    # comment with trailing spaces   \n",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "regex: ^[a-zA-Z0-9_.+-]+@[a-zA-Z0-9-]+\\.[a-zA-Z0-9-.]+$",
    "matrix[i][j] = matrix[i-1][j-1] + 1;",
    "// TODO(bob): fix this\n/* block */",
    "a->b->c; *p++ = *q++;",
    "key=value&other=thing",
    "```python\nprint('hi')\n```",
]

# --- contractions and case ------------------------------------------------------------
S += [
    "I'm here, you're there, he's gone, we've been, they'll come, she'd say, it's fine.",
    "I'M HERE, YOU'RE THERE, HE'S GONE, WE'VE BEEN, THEY'LL COME, SHE'D SAY",
    "I'M here You'Re there HE's gone We'VE been",
    "don't can't won't shouldn't isn't",
    "DON'T CAN'T WON'T",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock'n'roll o'clock y'all ma'am",
    "the dog's bone, the dogs' bones",
    "'quoted' \"double\" `back`",
    "it\u2019s a curly apostrophe",
    "'ſ long s contraction 'ſt",
    "CamelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
    "iPhone eBay McDonald's O'Neil",
    "HTTPServerError XMLHttpRequest",
    "aBcDeFgHiJkLmNoPqRsTuVwXyZ",
]

# --- special-token text -------------------------------------------------------------
S += [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<bos>",
    "<eos>",
    "<pad>",
    "<unk>",
    "<mask>",
    "<bos><bos>",
    "<<bos>>",
    "<bos>text<eos>",
    "<unused0> <unused99>",
    "[multimodal]",
    "<start_of_image><end_of_image>",
    "<|im_sta",
    "<|im_start",
    "im_start|>",
    "<|im_start|><|im_end|><|endoftext|>",
    "x<|im_end|>y",
    " <|im_start|> ",
    "<|im_start|>\n\n",
    "<repo_name>tessera<file_sep>main.c",
    "<s> </s> <unk>",
    "<start_of_turn><start_of_turn>",
    "<end_of_turn>\n",
    "<|endoftext|><|endoftext|>",
    "<fim_prefix>def<fim_suffix>end<fim_middle>",
    "<|im_start|>user<bos><start_of_turn>",
]

# --- punctuation, URLs, misc ---------------------------------------------------------
S += [
    "!!!",
    "???!!!...",
    "......",
    "-----",
    "=====",
    "*****",
    "~~~~~",
    "#####",
    "-- -- --",
    "'''",
    '"""',
    "(((nested)))",
    "[[a]] {{b}} <<c>>",
    "!@#$%^&*()_+-=[]{}|;':\",./<>?`~",
    "…—–•·°±×÷",
    "«»‹›„“”‘’",
    "§¶†‡※",
    "https://www.example.com/path/to/page?query=1&x=y#frag",
    "http://localhost:8080/api/v1/users/42",
    "ftp://files.example.org/pub/file.tar.gz",
    "mailto:someone@example.com",
    "user@example.com, first.last+tag@sub.domain.co.uk",
    "www.google.com",
    "C:\\Users\\Name\\Documents\\file.txt",
    "/usr/local/bin/python3",
    "@mention #hashtag $TICKER",
    "e.g. i.e. etc. vs. Mr. Dr.",
    "Hello...World!!!How???",
    "a.b.c.d.e",
    "__init__ __main__",
    "--flag=value -x",
    ":-) ;-) :D xD <3",
    "™ ® © ℠",
    "→ ← ↑ ↓ ⇒ ⇔",
    "∀x∈ℝ: x² ≥ 0 ∑ ∫ √ ∞",
    "♠♣♥♦ ♩♪♫♬",
    "☃ ☂ ☀ ★ ☆",
]

# --- mixed-case / ordinary sentences ------------------------------------------------
S += [
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the sunshine.",
    "What is the capital of France? The capital of France is Paris.",
    "Translate to French: I would like a cup of coffee.",
    "Summarize the following text in one sentence.",
    "Machine learning is a subset of artificial intelligence.",
    "To be, or not to be, that is the question.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.",
    "tHiS iS wEiRd CaSiNg",
    "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS !?",
    "a",
    "A",
    "I",
    "ab",
    "the",
    " the",
    "The",
    " The",
    "hello",
    " hello",
    "Hello",
    " Hello",
    "HELLO",
    "hello world",
    "Hello World",
    "hello  world",
    "\u00e9t\u00e9",
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9 co\u00f6perate",
    "Ελλάδα Ἀθῆναι",
]

# --- long strings -------------------------------------------------------------------
letters = "abcdefghijklmnopqrstuvwxyz"
S += [
    "a" * 10000,
    "".join(rng.choice(letters) for _ in range(10000)),
    "ab" * 3000,
    "Supercalifragilisticexpialidocious" * 60,
    " " * 5000,
    " " * 2000 + "x",
    "\n" * 3000,
    "\t" * 1000,
    "1234567890" * 300,
    "." * 3000,
    "!?" * 1500,
    "中文" * 1500,
    "😀" * 1000,
    "👨‍👩‍👧" * 200,
    "é" * 2000,
    "e\u0301" * 1000,
    "word " * 2000,
    "<|im_start|>" * 100,
    "<bos>" * 100,
    "x" * 4000 + " " + "y" * 4000,
    "".join(rng.choice(letters + letters.upper() + "0123456789") for _ in range(6000)),
    "http://example.com/" + "a/" * 1000,
    ("def f(x):\n    return x\n\n" * 150),
    "ﷺ" * 500,
    "ก" * 3000,
]

# --- systematic combinations (deterministic) ----------------------------------------
pieces = ["hello", "Hello", " world", "123", "4567", " ", "  ", "\n", "\t", "'s", "'T", "!", "?!", "…",
          "中文", "日本", "😀", "👍🏽", "é", "e\u0301", "<|im_start|>", "<bos>", "<b>", "\r\n", "--", "_x",
          "Ω", "ß", "İ", "ﬁ", "\u00a0", "x\u200by", "<end_of_turn>", "0", "Ⅻ", "²"]
for _ in range(80):
    k = rng.randint(2, 7)
    S.append("".join(rng.choice(pieces) for _ in range(k)))

# Random strings over a mixed alphabet, including rarely seen characters.
alphabet = (letters + letters.upper() + "0123456789" + " \n\t.,;:!?'\"()[]{}<>|-_=+*/\\@#$%^&~`" +
            "éèêàçñöüßøåæœ" + "абвгдеёжз" + "αβγδε" + "中文日本語한국어" + "😀👍🏽🇺🇸" + "\u0301\u0308\u00a0\u200b")
for _ in range(40):
    n = rng.randint(5, 80)
    S.append("".join(rng.choice(alphabet) for _ in range(n)))

seen = set()
corpus = []
for s in S:
    if s not in seen:
        seen.add(s)
        corpus.append(s)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tokenizer_corpus.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump(corpus, f, ensure_ascii=True, indent=0)
    f.write("\n")
print(f"wrote {len(corpus)} strings to {os.path.normpath(out)}")
