package re2

import (
	"slices"
	"strings"
	"unicode"
)

// groupNames are the Unicode classes Envoy 1.40's RE2 knows by name
// (\p{Name}, \pN; "Any" besides), as its re2/unicode_groups.cc lists
// them: case-sensitive, with underscores (Old_Italic). Go 1.26 names them
// otherwise (it takes \p{greek}, \p{Lc} and \p{Cn}, which RE2 refuses,
// and refuses \p{Old_Italic}), so this package reads the names itself.
var groupNames = strings.Fields(`
Adlam Ahom Anatolian_Hieroglyphs Arabic Armenian Avestan Balinese
Bamum Bassa_Vah Batak Bengali Bhaiksuki Bopomofo Brahmi Braille
Buginese Buhid C Canadian_Aboriginal Carian Caucasian_Albanian Cc Cf
Chakma Cham Cherokee Chorasmian Co Common Coptic Cs Cuneiform Cypriot
Cypro_Minoan Cyrillic Deseret Devanagari Dives_Akuru Dogra Duployan
Egyptian_Hieroglyphs Elbasan Elymaic Ethiopic Georgian Glagolitic
Gothic Grantha Greek Gujarati Gunjala_Gondi Gurmukhi Han Hangul
Hanifi_Rohingya Hanunoo Hatran Hebrew Hiragana Imperial_Aramaic
Inherited Inscriptional_Pahlavi Inscriptional_Parthian Javanese
Kaithi Kannada Katakana Kawi Kayah_Li Kharoshthi Khitan_Small_Script
Khmer Khojki Khudawadi L Lao Latin Lepcha Limbu Linear_A Linear_B
Lisu Ll Lm Lo Lt Lu Lycian Lydian M Mahajani Makasar Malayalam
Mandaic Manichaean Marchen Masaram_Gondi Mc Me Medefaidrin
Meetei_Mayek Mende_Kikakui Meroitic_Cursive Meroitic_Hieroglyphs Miao
Mn Modi Mongolian Mro Multani Myanmar N Nabataean Nag_Mundari
Nandinagari Nd New_Tai_Lue Newa Nko Nl No Nushu
Nyiakeng_Puachue_Hmong Ogham Ol_Chiki Old_Hungarian Old_Italic
Old_North_Arabian Old_Permic Old_Persian Old_Sogdian
Old_South_Arabian Old_Turkic Old_Uyghur Oriya Osage Osmanya P
Pahawh_Hmong Palmyrene Pau_Cin_Hau Pc Pd Pe Pf Phags_Pa Phoenician Pi
Po Ps Psalter_Pahlavi Rejang Runic S Samaritan Saurashtra Sc Sharada
Shavian Siddham SignWriting Sinhala Sk Sm So Sogdian Sora_Sompeng
Soyombo Sundanese Syloti_Nagri Syriac Tagalog Tagbanwa Tai_Le
Tai_Tham Tai_Viet Takri Tamil Tangsa Tangut Telugu Thaana Thai
Tibetan Tifinagh Tirhuta Toto Ugaritic Vai Vithkuqi Wancho
Warang_Citi Yezidi Yi Z Zanabazar_Square Zl Zp Zs
`)

// group is the Latin-1 content of a class RE2 knows, as sorted lo, hi
// pairs, and whether RE2 knows it.
func group(name string) ([]rune, bool) {
	if name == "Any" {
		return []rune{0, maxRune}, true
	}
	if _, ok := slices.BinarySearch(groupNames, name); !ok {
		return nil, false
	}
	t := unicode.Categories[name]
	if t == nil {
		t = unicode.Scripts[name]
	}
	var out []rune
	for r := rune(0); r <= maxRune; r++ {
		if t == nil || !unicode.Is(t, r) {
			continue
		}
		if n := len(out); n > 0 && out[n-1] == r-1 {
			out[n-1] = r
		} else {
			out = append(out, r, r)
		}
	}
	return out, true
}
