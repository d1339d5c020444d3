import type { Locale } from './locale.js'

const HTML_ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;'
}

/** Escapes text for use in HTML element content and in quoted attribute values. */
export function escapeHtml (value: string): string {
  return value.replace(/[&<>"']/g, (char) => HTML_ESCAPES[char] ?? char)
}

/**
 * The service's own wording of the verification mail, one entry per locale: what a tenant
 * gets for every language and part it does not write itself. Kept as TypeScript rather than
 * template files so nothing is read from disk at runtime: the same code works from the sources
 * and from the compiled dist/ tree.
 *
 * Every function returns plain text. message.ts escapes whatever ends up in the HTML part, so
 * a phrase here may contain any character (apostrophes, « », ¿ …) without breaking markup.
 */
export interface LocaleTemplate {
  /** BCP 47 tag for the html lang attribute, so screen readers pick the right voice. */
  readonly lang: string
  /** Never receives the code: subjects show up in notifications and mailbox lists. */
  readonly subject: (brand: string) => string
  /** Opening sentence of the text part, which carries the code inline. */
  readonly codeSentence: (brand: string, code: string) => string
  /** Line above the code block of the HTML part. */
  readonly codeIntro: (brand: string) => string
  readonly expiry: (minutes: number) => string
  readonly ignore: string
}

/**
 * Picks the singular or plural noun via the locale's CLDR rules, which differ across our
 * languages: French treats 0 as singular, English does not.
 */
function countOf (locale: Locale, count: number, one: string, other: string): string {
  return `${count} ${pluralRules[locale].select(count) === 'one' ? one : other}`
}

// Built once: constructing Intl.PluralRules costs more than rendering a whole message.
const pluralRules: Readonly<Record<Locale, Intl.PluralRules>> = {
  en: new Intl.PluralRules('en'),
  fr: new Intl.PluralRules('fr'),
  de: new Intl.PluralRules('de'),
  es: new Intl.PluralRules('es')
}

export const TEMPLATES: Readonly<Record<Locale, LocaleTemplate>> = {
  en: {
    lang: 'en',
    subject: (brand) => `Your ${brand} verification code`,
    codeSentence: (brand, code) => `Your ${brand} verification code is ${code}.`,
    codeIntro: (brand) => `Your ${brand} verification code is:`,
    expiry: (count) => `It expires in ${countOf('en', count, 'minute', 'minutes')}.`,
    ignore: 'If you didn\u2019t request this, you can ignore this email.'
  },
  fr: {
    lang: 'fr',
    subject: (brand) => `Votre code de vérification ${brand}`,
    codeSentence: (brand, code) => `Votre code de vérification ${brand} est ${code}.`,
    // French typography puts a no-break space before the colon.
    codeIntro: (brand) => `Votre code de vérification ${brand} est\u00a0:`,
    expiry: (count) => `Il expire dans ${countOf('fr', count, 'minute', 'minutes')}.`,
    ignore: 'Si vous n\u2019êtes pas à l\u2019origine de cette demande, vous pouvez ignorer cet e-mail.'
  },
  de: {
    lang: 'de',
    // "für {brand}" rather than a hyphenated compound, which breaks with multi-word brands.
    subject: (brand) => `Ihr Bestätigungscode für ${brand}`,
    codeSentence: (brand, code) => `Ihr Bestätigungscode für ${brand} lautet ${code}.`,
    codeIntro: (brand) => `Ihr Bestätigungscode für ${brand} lautet:`,
    expiry: (count) => `Er ist ${countOf('de', count, 'Minute', 'Minuten')} gültig.`,
    ignore: 'Falls Sie diesen Code nicht angefordert haben, können Sie diese E-Mail ignorieren.'
  },
  es: {
    lang: 'es',
    subject: (brand) => `Tu código de verificación de ${brand}`,
    codeSentence: (brand, code) => `Tu código de verificación de ${brand} es ${code}.`,
    codeIntro: (brand) => `Tu código de verificación de ${brand} es:`,
    expiry: (count) => `Caduca en ${countOf('es', count, 'minuto', 'minutos')}.`,
    ignore: 'Si no has solicitado este código, puedes ignorar este correo.'
  }
}

/** The text part: short lines, blank-line separated, readable in any client. */
export function renderText (template: LocaleTemplate, brand: string, code: string, minutes: number): string {
  return [
    template.codeSentence(brand, code),
    template.expiry(minutes),
    template.ignore
  ].join('\n\n') + '\n'
}

/** Fragments of the HTML part. Each one MUST already be HTML-escaped by the caller. */
export interface EscapedHtmlParts {
  lang: string
  title: string
  codeIntro: string
  code: string
  expiry: string
  ignore: string
}

const FONT = "-apple-system,BlinkMacSystemFont,'Segoe UI',Roboto,Helvetica,Arial,sans-serif"
const MONO = "'SFMono-Regular',Menlo,Consolas,'Liberation Mono','Courier New',monospace"

/**
 * A single-column layout in the style mail clients render reliably: nested tables marked
 * role="presentation" (so screen readers do not announce them as data tables), inline styles
 * only (many clients strip <style>), and colours with at least 4.5:1 contrast.
 */
export function renderHtml (parts: EscapedHtmlParts): string {
  return `<!DOCTYPE html>
<html lang="${parts.lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light">
<title>${parts.title}</title>
</head>
<body style="margin:0;padding:0;background-color:#f6f7f9;">
<table role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0" style="background-color:#f6f7f9;">
<tr>
<td align="center" style="padding:32px 16px;">
<table role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0" style="max-width:480px;background-color:#ffffff;border:1px solid #e3e6ea;border-radius:8px;">
<tr>
<td style="padding:32px;font-family:${FONT};font-size:16px;line-height:24px;color:#1a1f36;">
<p style="margin:0 0 16px 0;">${parts.codeIntro}</p>
<p style="margin:0 0 16px 0;padding:16px;background-color:#f1f3f5;border-radius:6px;text-align:center;font-family:${MONO};font-size:32px;line-height:40px;font-weight:700;letter-spacing:6px;color:#1a1f36;">${parts.code}</p>
<p style="margin:0 0 16px 0;">${parts.expiry}</p>
<p style="margin:0;font-size:14px;line-height:20px;color:#5c6370;">${parts.ignore}</p>
</td>
</tr>
</table>
</td>
</tr>
</table>
</body>
</html>
`
}

/** The built-in subject, text and HTML parts in one language. */
export const BUILTIN_PARTS = {
  subject: (locale: Locale, brand: string): string => TEMPLATES[locale].subject(brand),
  text: (locale: Locale, brand: string, code: string, minutes: number): string => renderText(TEMPLATES[locale], brand, code, minutes),
  html: (locale: Locale, brand: string, code: string, minutes: number): string => {
    const template = TEMPLATES[locale]
    return renderHtml({
      lang: escapeHtml(template.lang),
      title: escapeHtml(template.subject(brand)),
      codeIntro: escapeHtml(template.codeIntro(brand)),
      code: escapeHtml(code),
      expiry: escapeHtml(template.expiry(minutes)),
      ignore: escapeHtml(template.ignore)
    })
  }
} as const
