"""A made-up τ² domain, shipped by Orchestra as an example of a domain directory: a library's lending desk.

A domain directory needs a DB class (a tau2.environment.db.DB subclass: pydantic models of the data in db.json),
one toolkit (a tau2.environment.toolkit.ToolKitBase subclass whose `db` annotation names that DB class), each tool
a method marked `@is_tool(ToolType.READ | WRITE | GENERIC)` whose docstring's Args become its JSON schema,
plus policy.md and tasks.json beside it. `python -m cluster.tau2_gold examples/tau2/library` replays its tasks'
gold actions. The data are invented; nothing here comes from τ²-bench's domains.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from tau2.environment.db import DB
from tau2.environment.toolkit import ToolKitBase, ToolType, is_tool


class Book(BaseModel):
    book_id: str = Field(description="Unique identifier of the book")
    title: str = Field(description="Title of the book")
    author: str = Field(description="Author of the book")
    copies_available: int = Field(description="Copies on the shelf now")


class Member(BaseModel):
    member_id: str = Field(description="Unique identifier of the member")
    name: str = Field(description="Full name of the member")
    loans: list[str] = Field(description="Ids of the member's open loans")


class Loan(BaseModel):
    loan_id: str = Field(description="Unique identifier of the loan")
    member_id: str = Field(description="The borrowing member")
    book_id: str = Field(description="The borrowed book")
    returned: bool = Field(description="Whether the book has come back")


class LibraryDB(DB):
    """Books, members and loans of one library."""

    books: dict[str, Book] = Field(description="Books by id")
    members: dict[str, Member] = Field(description="Members by id")
    loans: dict[str, Loan] = Field(description="Loans by id")


class LibraryTools(ToolKitBase):
    """The lending desk's tools."""

    db: LibraryDB

    def __init__(self, db: LibraryDB) -> None:
        super().__init__(db)

    @is_tool(ToolType.READ)
    def find_member(self, name: str) -> Member:
        """
        Find a member by full name.

        Args:
            name: The member's full name, e.g. 'Ada Lovelace'

        Returns:
            The member

        Raises:
            ValueError: If no member has that name
        """
        for member in self.db.members.values():
            if member.name.lower() == name.strip().lower():
                return member
        raise ValueError(f"No member named {name}")

    @is_tool(ToolType.READ)
    def search_books(self, query: str) -> list[Book]:
        """
        Search books whose title or author contains the query.

        Args:
            query: Part of a title or an author's name

        Returns:
            The matching books
        """
        q = query.strip().lower()
        return [b for b in self.db.books.values() if q in b.title.lower() or q in b.author.lower()]

    @is_tool(ToolType.WRITE)
    def borrow_book(self, member_id: str, book_id: str) -> Loan:
        """
        Lend a book to a member.

        Args:
            member_id: The member's id
            book_id: The book's id

        Returns:
            The new loan

        Raises:
            ValueError: If the member or book is unknown, no copy is available, or the member has 3 open loans
        """
        member, book = self.db.members.get(member_id), self.db.books.get(book_id)
        if member is None or book is None:
            raise ValueError("Unknown member or book")
        if book.copies_available < 1:
            raise ValueError(f"No copy of {book.title} is available")
        if len(member.loans) >= 3:
            raise ValueError("Members may hold at most 3 loans")
        loan = Loan(loan_id=f"loan_{len(self.db.loans) + 1}", member_id=member_id, book_id=book_id, returned=False)
        self.db.loans[loan.loan_id] = loan
        member.loans.append(loan.loan_id)
        book.copies_available -= 1
        return loan

    @is_tool(ToolType.WRITE)
    def return_book(self, loan_id: str) -> Loan:
        """
        Record that a loaned book came back.

        Args:
            loan_id: The loan's id

        Returns:
            The closed loan

        Raises:
            ValueError: If the loan is unknown or already returned
        """
        loan = self.db.loans.get(loan_id)
        if loan is None or loan.returned:
            raise ValueError(f"No open loan {loan_id}")
        loan.returned = True
        self.db.members[loan.member_id].loans.remove(loan_id)
        self.db.books[loan.book_id].copies_available += 1
        return loan

    @is_tool(ToolType.GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """
        Transfer the member to a human librarian, with a summary of the request.

        Args:
            summary: What the member needs

        Returns:
            A confirmation
        """
        return "Transfer successful"
