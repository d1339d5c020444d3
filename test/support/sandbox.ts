/** One message of the sandbox inbox, as GET /sandbox/messages lists it. */
export interface SandboxMessage {
  requestId: string
  to: string
  subject: string
  code: string
}

/** The sandbox inbox of `email` (newest first), read over the network with a secret sandbox key. */
export async function sandboxMessages (base: string, key: string, email: string): Promise<SandboxMessage[]> {
  const response = await fetch(`${base}/sandbox/messages?email=${encodeURIComponent(email)}`, { headers: { authorization: `Bearer ${key}` } })
  const body = await response.json() as { data?: { messages?: SandboxMessage[] } }
  if (response.status !== 200 || body.data?.messages === undefined) throw new Error(`sandbox inbox answered ${response.status}: ${JSON.stringify(body)}`)
  return body.data.messages
}

/** The code mailed for `requestId`, from the sandbox inbox. */
export async function sandboxCode (base: string, key: string, email: string, requestId: string): Promise<string> {
  const message = (await sandboxMessages(base, key, email)).find((candidate) => candidate.requestId === requestId)
  if (message === undefined) throw new Error(`no sandbox message for ${requestId}`)
  return message.code
}

/** A different 6-digit guess than `code`. */
export function wrongGuess (code: string): string {
  return code === '000000' ? '000001' : '000000'
}
