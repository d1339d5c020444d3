/**
 * Formats shared by the request schemas, the configuration and the tenants file. Plain
 * strings, so that schemas stay the bottom layer: lib builds its RegExps from these.
 */

/**
 * A pattern of the environment schema with what it asks for in words: `rule` ends the error
 * line of a value that does not match ("Invalid configuration: NAME must be…"), `words` is the
 * configuration table's "Allowed values". Kept beside the regex so that neither can drift from it.
 */
export interface NamedPattern {
  pattern: string
  rule: string
  words: string
}

/** A velocity limit, `max/window`: `5/15m`, `30/1m`, `600/1h`. */
export const RATE_LIMIT_PATTERN = '^[0-9]{1,9}/[1-9][0-9]{0,6}[smhd]$'

export const RATE_LIMIT: NamedPattern = {
  pattern: RATE_LIMIT_PATTERN,
  rule: 'must be max/window: a whole number, a slash, then a window such as 1m, 15m, 1h or 1d (e.g. 30/1m)',
  words: '`max/window`, window in `s`, `m`, `h` or `d` (`30/1m`)'
}

/** A velocity limit that can be switched off. */
export const RATE_LIMIT_OR_OFF: NamedPattern = {
  pattern: '^([0-9]{1,9}/[1-9][0-9]{0,6}[smhd]|off)$',
  rule: 'must be max/window (e.g. 15/15m) or off',
  words: '`max/window` (`15/15m`), or `off`'
}

/** A quota window: `<n>s`, `<n>m`, `<n>h`, `<n>d` or `month`. */
export const WINDOW_PATTERN = '^([1-9][0-9]{0,6}[smhd]|month)$'

/**
 * An `X-Request-Id` a proxy in TRUST_PROXY may hand the service (a mesh sidecar's), taken as
 * the request's own: 1 to 128 characters, none of which can break a log line. Every other
 * request gets a fresh UUID, which fits too.
 */
export const PROXY_REQUEST_ID_PATTERN = '^[A-Za-z0-9._:+=/@-]{1,128}$'

/** What verify accepts as a requestId: URL-safe, at most 64 characters. */
export const REQUEST_ID_PATTERN = '^[A-Za-z0-9_-]{1,64}$'

/**
 * A mesh workload as a key's `workloads` and MESH_GATEWAY_IDENTITIES name it: an exact
 * identity (printable ASCII, no `*`), or a prefix ending in `/*` for one more path segment.
 */
export const WORKLOAD_PATTERN = '^[\\x21-\\x29\\x2b-\\x7e]+(/\\*)?$'

/** The longest identity a workload pattern may name (a SPIFFE ID is at most 2048 bytes). */
export const WORKLOAD_MAX_LENGTH = 2048

/** An API key: kind, mode, then base62. */
export const KEY_PATTERN = '^(sk|rk)_(live|test)_[0-9A-Za-z]{32,128}$'

/** MAIL_TRANSPORT: `log`, or one or two providers in the order a send tries them. */
export const MAIL_TRANSPORT: NamedPattern = {
  pattern: '^(log|(ses|smtp)(,(ses|smtp))?)$',
  rule: 'must be one of log, ses, smtp, or two providers in the order to try them (ses,smtp or smtp,ses)',
  words: '`log`, `ses`, `smtp`, `ses,smtp`, `smtp,ses`'
}

/**
 * SNS's own signing-certificate URLs, and nothing else: HTTPS on
 * sns.<region>.amazonaws.com[.cn], SimpleNotificationService-<hex>.pem at the root. The second
 * label has a region's shape (two letters, dashed words, a digit: us-east-1, us-gov-west-1,
 * cn-north-1): `sns.s3.amazonaws.com` is S3's name for the bucket called `sns`, served to
 * whoever owns it.
 */
export const DEFAULT_SNS_CERT_URL_PATTERN = '^https://sns\\.[a-z]{2}(-[a-z]+)+-[0-9]\\.amazonaws\\.com(\\.cn)?/SimpleNotificationService-[0-9a-f]+\\.pem$'

/** SES_FEEDBACK_TOPIC_ARNS: comma-separated ARNs. */
export const ARN_LIST: NamedPattern = {
  pattern: '^arn:[^,\\s]+(,arn:[^,\\s]+)*$',
  rule: 'must be one or more ARNs (arn:aws:sns:…), comma-separated',
  words: 'ARNs, comma-separated (`arn:aws:sns:eu-west-1:123456789012:ses-events`)'
}

/**
 * A duration: a whole number then ms, s, m, h or d (`500ms`, `5s`, `15m`, `24h`, `30d`). A
 * variable whose name carries its unit (`…_MS`, `…_SECONDS`) also takes a plain number in it.
 */
export const DURATION_PATTERN = '^[0-9]{1,12}(ms|s|m|h|d)?$'
